package modal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modalnet"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

var (
	_ engine.Engine       = (*Engine)(nil)
	_ engine.PortURLer    = (*Engine)(nil)
	_ engine.PortClienter = (*Engine)(nil)
	_ engine.Starter      = (*Engine)(nil)
)

// Capabilities: Modal isolates sandboxes and snapshots filesystems, DialPort reaches
// the ports given a tunnel at create (Spec.Ports), sshd's port is tunnelled as raw TCP
// (SSH), volumes are Modal Volumes (volumes.go), and memory and CPU limits are Modal's
// resources (pids and disk limits are refused). No ExecKill: Modal's protocol has no
// call that kills an exec. No pause; no Spec.Image (a snapshot's image id goes in
// Spec.Snapshot); no host mounts.
func (e *Engine) Capabilities() engine.Capabilities {
	return engine.Capabilities{Isolated: true, Snapshot: true, DialPort: true, Names: true, TTY: true, FileErrors: true, Volumes: true,
		Limits: true, SSH: true}
}

// tunnelPorts splits Spec.Ports into Modal's encrypted ports (TLS-terminated tunnels)
// and its unencrypted ones: sshd's, whose protocol brings its own encryption and which
// ssh clients reach as raw TCP.
func tunnelPorts(ports []int) (encrypted, unencrypted []int) {
	for _, p := range ports {
		if p == rules.PortSSH {
			unencrypted = append(unencrypted, p)
		} else {
			encrypted = append(encrypted, p)
		}
	}
	return encrypted, unencrypted
}

func (e *Engine) sandbox(ctx context.Context, id string) (*modalsdk.Sandbox, error) {
	sb, err := e.sandboxByID(ctx, id)
	return sb, notFound(err)
}

// notFound maps the SDK's "gone" answers (its NotFoundError, or gRPC's NotFound that
// some calls return as they are) to engine.ErrNotFound.
func notFound(err error) error {
	if err == nil {
		return nil
	}
	var nf modalsdk.NotFoundError
	if errors.As(err, &nf) || status.Code(err) == codes.NotFound {
		return fmt.Errorf("%w: %v", engine.ErrNotFound, err)
	}
	return err
}

// gone is err, or engine.ErrNotFound when the call failed because the sandbox has
// finished (Modal answers calls on a finished sandbox with FailedPrecondition or a
// generic filesystem error).
func gone(ctx context.Context, sb *modalsdk.Sandbox, err error) error {
	if err == nil || errors.Is(err, engine.ErrNotFound) {
		return err
	}
	if code, perr := sb.Poll(ctx, nil); perr == nil && code != nil {
		return fmt.Errorf("sandbox %s has finished: %w: %v", sb.SandboxID, engine.ErrNotFound, err)
	}
	return err
}

// Create starts a sandbox from spec.Snapshot (an image id) or the base image, with
// spec.Volumes (Modal Volumes, which must exist) mounted and spec.EgressHosts as
// Modal's outbound allow-lists (allowlists).
func (e *Engine) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	switch {
	case spec.Image != "":
		return engine.Info{}, fmt.Errorf("modal: Spec.Image (a snapshot's image goes in Spec.Snapshot): %w", engine.ErrUnsupported)
	case len(spec.Mounts) > 0:
		return engine.Info{}, fmt.Errorf("modal: mount of host path %s: Modal binds no host paths: %w", spec.Mounts[0].Source, engine.ErrUnsupported)
	case spec.Runtime != "":
		return engine.Info{}, fmt.Errorf("modal: runtime %q: Modal chooses its own: %w", spec.Runtime, engine.ErrUnsupported)
	case spec.Limits.Pids != 0:
		return engine.Info{}, fmt.Errorf("modal: pids limit: Modal has none: %w", engine.ErrLimit)
	case spec.Limits.DiskBytes != 0:
		return engine.Info{}, fmt.Errorf("modal: disk limit: Modal has none: %w", engine.ErrLimit)
	case spec.Limits.MemoryBytes != 0 && spec.Limits.MemoryBytes < 1<<20:
		return engine.Info{}, fmt.Errorf("modal: memory limit %d bytes: Modal counts whole MiB: %w", spec.Limits.MemoryBytes, engine.ErrLimit)
	}
	if spec.Timeout == 0 {
		spec.Timeout = DefaultTimeout
	}
	id, err := e.o.Gateway.Create(ctx, e, "modal", spec, e.create)
	if err != nil {
		return engine.Info{}, err
	}
	return e.Get(ctx, id)
}

// create makes the sandbox of spec (its secrets already with the gateway) and returns
// its id.
func (e *Engine) create(ctx context.Context, spec engine.Spec) (string, error) {
	cidrs, domains, err := allowlists(spec)
	if err != nil {
		return "", err
	}
	c, app, err := e.connect(ctx, provider.OpCreateSandbox)
	if err != nil {
		return "", err
	}
	img, err := e.image.Image(c)
	if err != nil {
		return "", err
	}
	snap := spec.Snapshot
	if snap == "" {
		// The host's base snapshot (MODAL_BASE_SNAPSHOT_ID) stands for the base image.
		snap, _ = NormalizeEnvValue(e.o.Getenv(provider.EnvModalBaseSnapshotID))
	}
	if snap != "" {
		if img, err = c.Images.FromID(ctx, snap, nil); err != nil {
			return "", notFound(err)
		}
	}
	env := map[string]string{}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	encrypted, unencrypted := tunnelPorts(spec.Ports)
	params := &modalsdk.SandboxCreateParams{Name: spec.Name, Env: env, EncryptedPorts: encrypted, UnencryptedPorts: unencrypted,
		// A Modal sandbox with network has its own (its ports are its own) and reaches the
		// outside: Spec.Egress; Spec.Network asks no less.
		Timeout: wholeSeconds(spec.Timeout), BlockNetwork: !spec.Network && !spec.Egress, Tags: maps.Clone(spec.Labels),
		OutboundCIDRAllowlist: cidrs, OutboundDomainAllowlist: domains}
	if spec.Limits.MemoryBytes > 0 {
		// A request of the limit, or the SDK refuses the limit alone.
		params.MemoryMiB = int(spec.Limits.MemoryBytes >> 20)
		params.MemoryLimitMiB = params.MemoryMiB
	}
	if spec.Limits.CPUMillis > 0 {
		params.CPU = float64(spec.Limits.CPUMillis) / 1000
		params.CPULimit = params.CPU
	}
	if err := e.mountVolumes(ctx, c, spec, params); err != nil {
		return "", err
	}
	sb, err := c.Sandboxes.Create(ctx, app, img, params)
	if err != nil {
		var ae modalsdk.AlreadyExistsError
		if errors.As(err, &ae) {
			return "", fmt.Errorf("%w: %v", engine.ErrNameTaken, err)
		}
		return "", err
	}
	return sb.SandboxID, nil
}

// allowlists are Modal's outbound CIDR and domain allow-lists for spec.EgressHosts
// (modalnet.Split): its addresses and prefixes the CIDRs, its names, "*.suffix"
// patterns and "*" the domains, matched by Modal. Both lists are set, so a list of
// names alone lets no raw address through, as on the local engine. None (nil, Modal's
// open network) without Egress, with Network (the whole outside) or without
// EgressHosts.
func allowlists(spec engine.Spec) (cidrs, domains *modalsdk.Allowlist, err error) {
	if !spec.Egress || spec.Network || len(spec.EgressHosts) == 0 {
		return nil, nil, nil
	}
	c, d, err := modalnet.Split(spec.EgressHosts)
	if err != nil {
		return nil, nil, fmt.Errorf("modal: %w", err)
	}
	return &modalsdk.Allowlist{Entries: c}, &modalsdk.Allowlist{Entries: d}, nil
}

// Get describes a sandbox: running until Modal reports its result.
func (e *Engine) Get(ctx context.Context, id string) (engine.Info, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return engine.Info{}, err
	}
	code, err := sb.Poll(ctx, nil)
	if err != nil {
		return engine.Info{}, notFound(err)
	}
	info := engine.Info{ID: id, State: engine.StateRunning, Isolated: true, ExitCode: code}
	if code != nil {
		info.State = engine.StateDead
		return info, nil
	}
	if tags, err := sb.GetTags(ctx, nil); err == nil {
		info.Labels, info.Volumes = splitTags(tags)
	}
	if ts, err := sb.Tunnels(ctx, TunnelTimeout, nil); err == nil {
		for port, t := range ts {
			host, hostPort := t.Host, t.Port
			if h, p, err := t.TCPSocket(); err == nil {
				host, hostPort = h, p // an unencrypted port's raw TCP end
			}
			info.Tunnels = append(info.Tunnels, engine.Tunnel{Port: port, Host: host, HostPort: hostPort})
		}
	}
	return info, nil
}

// List returns the app's running sandboxes (Modal does not list finished ones).
func (e *Engine) List(ctx context.Context) ([]engine.Info, error) {
	c, app, err := e.connect(ctx, provider.OpCheckSandboxes)
	if err != nil {
		return nil, err
	}
	seq, err := c.Sandboxes.List(ctx, &modalsdk.SandboxListParams{AppID: app.AppID})
	if err != nil {
		return nil, err
	}
	var out []engine.Info
	for sb, err := range seq {
		if err != nil {
			return nil, err
		}
		out = append(out, engine.Info{ID: sb.SandboxID, State: engine.StateRunning, Isolated: true})
	}
	return out, nil
}

// Exec runs argv with streamed stdio.
func (e *Engine) Exec(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return -1, err
	}
	env := map[string]string{}
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	start := time.Now()
	// With TTY, Modal runs the command on a terminal (its size is Modal's default;
	// Resize is not part of the protocol) and everything comes on stdout.
	proc, err := sb.Exec(ctx, req.Argv, &modalsdk.SandboxExecParams{Workdir: req.Cwd, Env: env, Timeout: wholeSeconds(req.Timeout), PTY: req.TTY})
	if err != nil {
		return -1, gone(ctx, sb, notFound(err))
	}
	var wg sync.WaitGroup
	copyOut := func(w io.Writer, r io.Reader) {
		defer wg.Done()
		if w == nil {
			w = io.Discard
		}
		io.Copy(w, r)
	}
	stdout, stderr := req.Stdout, req.Stderr
	if stdout != nil && stdout == stderr {
		// One writer for both streams (a caller's combined output): the two copies
		// below must not write to it at once.
		stdout = &lockedWriter{w: stdout}
		stderr = stdout
	}
	wg.Add(2)
	go copyOut(stdout, proc.Stdout)
	go copyOut(stderr, proc.Stderr)
	if req.Stdin != nil {
		go func() {
			io.Copy(proc.Stdin, req.Stdin)
			proc.Stdin.Close()
		}()
	}
	code, err := proc.Wait(ctx, nil)
	if ctx.Err() != nil {
		// Modal has no call that kills an exec: stop reading its output, which would
		// go on as long as the command runs.
		proc.Stdout.Close()
		proc.Stderr.Close()
	}
	wg.Wait()
	var te modalsdk.ExecTimeoutError
	if errors.As(err, &te) {
		return 124, fmt.Errorf("%w: %v", engine.ErrTimeout, err)
	}
	if err == nil && code == 124 && req.Timeout > 0 && time.Since(start) >= req.Timeout {
		// Killed at its timeout: 124 is what the server reports, as `timeout` does.
		return 124, fmt.Errorf("exec: %w", engine.ErrTimeout)
	}
	return code, err
}

func (e *Engine) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	data, err := sb.Filesystem.ReadBytes(ctx, path, nil)
	return data, gone(ctx, sb, fsErr(err))
}

func (e *Engine) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return err
	}
	if err := sb.Filesystem.WriteBytes(ctx, data, path, nil); err != nil {
		return gone(ctx, sb, fsErr(err))
	}
	if perm := fs.FileMode(mode).Perm(); perm != 0 && perm != 0o644 {
		var stderr bytes.Buffer
		code, err := e.Exec(ctx, id, engine.ExecRequest{Argv: []string{"chmod", strconv.FormatUint(uint64(perm), 8), "--", path},
			Stderr: &stderr, Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if code != 0 {
			return fmt.Errorf("chmod %s: exit code %d: %s", path, code, provider.CapOutput(stderr.String(), 2048))
		}
	}
	return nil
}

func toInfo(f modalsdk.FileInfo) engine.FileInfo {
	mode := fs.FileMode(f.Mode).Perm()
	if f.Type == modalsdk.FileTypeDirectory {
		mode |= fs.ModeDir
	}
	if f.Type == modalsdk.FileTypeSymlink {
		mode |= fs.ModeSymlink
	}
	sec := int64(f.ModifiedTime)
	return engine.FileInfo{Name: f.Name, Path: f.Path, Size: f.Size, Mode: uint32(mode), IsDir: f.Type == modalsdk.FileTypeDirectory,
		ModTime: time.Unix(sec, int64((f.ModifiedTime-float64(sec))*1e9))}
}

func (e *Engine) ListFiles(ctx context.Context, id, dir string) ([]engine.FileInfo, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	list, err := sb.Filesystem.ListFiles(ctx, dir, nil)
	if err != nil {
		return nil, gone(ctx, sb, fsErr(err))
	}
	out := make([]engine.FileInfo, 0, len(list))
	for _, f := range list {
		out = append(out, toInfo(f))
	}
	return out, nil
}

func (e *Engine) Stat(ctx context.Context, id, path string) (engine.FileInfo, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return engine.FileInfo{}, err
	}
	f, err := sb.Filesystem.Stat(ctx, path, nil)
	if err != nil {
		return engine.FileInfo{}, gone(ctx, sb, fsErr(err))
	}
	return toInfo(*f), nil
}

func (e *Engine) MkdirAll(ctx context.Context, id, path string) error {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return err
	}
	return gone(ctx, sb, fsErr(sb.Filesystem.MakeDirectory(ctx, path, nil)))
}

func (e *Engine) Remove(ctx context.Context, id, path string) error {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return err
	}
	return gone(ctx, sb, fsErr(sb.Filesystem.Remove(ctx, path, &modalsdk.SandboxFilesystemRemoveParams{Recursive: true})))
}

// fsErr maps a missing path to fs.ErrNotExist, and the SDK's is-a-directory and
// not-a-directory errors to engine's.
func fsErr(err error) error {
	var (
		fnf   modalsdk.SandboxFilesystemNotFoundError
		isDir modalsdk.SandboxFilesystemIsADirectoryError
		notD  modalsdk.SandboxFilesystemNotADirectoryError
	)
	switch {
	case errors.As(err, &fnf):
		return fmt.Errorf("%w: %v", fs.ErrNotExist, err)
	case errors.As(err, &isDir):
		return fmt.Errorf("%w: %v", engine.ErrIsDir, err)
	case errors.As(err, &notD):
		return fmt.Errorf("%w: %v", engine.ErrNotDir, err)
	}
	return notFound(err)
}

func (e *Engine) Snapshot(ctx context.Context, id string) (string, error) {
	sb, err := e.sandbox(ctx, id)
	if err != nil {
		return "", err
	}
	img, err := sb.SnapshotFilesystem(ctx, nil)
	if err != nil {
		return "", gone(ctx, sb, notFound(err))
	}
	return img.ImageID, nil
}

func (e *Engine) Pause(ctx context.Context, id string) error {
	return fmt.Errorf("modal: %w", engine.ErrUnsupported)
}

func (e *Engine) Resume(ctx context.Context, id string) error {
	return fmt.Errorf("modal: %w", engine.ErrUnsupported)
}

// Terminate ends the sandbox; one that is already gone is success.
// The sandbox's gateway credential dies with it.
func (e *Engine) Terminate(ctx context.Context, id string) error {
	return e.o.Gateway.Terminate(ctx, e, id, e.terminate)
}

func (e *Engine) terminate(ctx context.Context, id string) error {
	sb, err := e.sandbox(ctx, id)
	if errors.Is(err, engine.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := sb.Terminate(ctx, nil); err != nil {
		if errors.Is(notFound(err), engine.ErrNotFound) || provider.IsNotFoundMessage(strings.ToLower(err.Error())) {
			return nil
		}
		return err
	}
	return nil
}
