package e2b

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
)

// Engine is an engine.Engine over E2B: sandboxctl drives E2B sandboxes (or the local
// server's) with it. Sandbox ids are E2B's; Create uses EngineOptions.Template, or
// Spec.Snapshot as the template. Every call that needs envd connects first, which
// resumes a paused sandbox (as E2B's SDKs do); Get and List never do.
type Engine struct {
	c *Client
	o EngineOptions
}

var (
	_ engine.Engine    = (*Engine)(nil)
	_ engine.PortURLer = (*Engine)(nil)
	_ engine.Starter   = (*Engine)(nil)
)

// EngineOptions configure NewEngine.
type EngineOptions struct {
	// Template is the template of sandboxes created without a snapshot; without it,
	// Create needs Spec.Snapshot.
	Template string
	// Timeout is the lifetime of new and connected sandboxes; zero means 1 hour.
	Timeout time.Duration
	// Gateway is the egress gateway that carries Spec.Secrets; without it a spec
	// with secrets is refused.
	Gateway *gateway.Engine
	// LocalTunnels resolves ports through the local server's mapping (PortURL).
	LocalTunnels bool
}

// EngineOptionsFromEnv reads E2B_TEMPLATE and E2B_LOCAL_TUNNELS.
func EngineOptionsFromEnv(getenv func(string) string) EngineOptions {
	lt := strings.ToLower(strings.TrimSpace(getenv(EnvLocalTunnels)))
	return EngineOptions{Template: strings.TrimSpace(getenv(EnvTemplate)), LocalTunnels: lt == "1" || lt == "true"}
}

// NewEngine returns an engine over the client.
func NewEngine(c *Client, o EngineOptions) (*Engine, error) {
	if c == nil {
		return nil, errors.New("e2b engine: a client is required")
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Hour
	}
	return &Engine{c: c, o: o}, nil
}

// engineErr maps E2B's not-found answers to engine.ErrNotFound, and a route the
// server does not serve (501: the local server on an engine without volumes, say) to
// engine.ErrUnsupported.
func engineErr(err error) error {
	var ae *e2bwire.APIError
	switch {
	case err == nil:
		return nil
	case IsNotFound(err):
		return fmt.Errorf("%w: %w", engine.ErrNotFound, err)
	case errors.As(err, &ae) && ae.Status == http.StatusNotImplemented:
		return fmt.Errorf("%w: %w", engine.ErrUnsupported, err)
	}
	return err
}

// Capabilities: E2B pauses and snapshots; its sandboxes are VMs, its volumes are
// mounted read-write (E2B has no read-only mount), and DialPort bridges through envd
// (dialport.go). No names or TTY (envd has terminals; this adapter does not drive
// them), and envd's file errors do not tell is-a-directory from not-a-directory but by
// their text.
func (e *Engine) Capabilities() engine.Capabilities {
	return engine.Capabilities{Isolated: true, Pause: true, Snapshot: true, ExecKill: true, Volumes: true, DialPort: true}
}

// Create creates a sandbox with Spec.Volumes as E2B volumeMounts; Spec.Name, Ports,
// Limits, Mounts and a read-only volume have no E2B counterpart and are refused
// rather than ignored.
func (e *Engine) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	switch {
	case spec.Limits != (engine.Limits{}):
		// A template fixes an E2B sandbox's memory and CPUs; nothing per sandbox.
		return engine.Info{}, fmt.Errorf("e2b: memory, cpus, pids and disk limits: E2B sets them per template, not per sandbox: %w", engine.ErrLimit)
	case spec.Name != "":
		return engine.Info{}, fmt.Errorf("e2b: name %q: E2B sandboxes have no names: %w", spec.Name, engine.ErrUnsupported)
	case len(spec.Mounts) > 0:
		return engine.Info{}, fmt.Errorf("e2b: mount of host path %s: E2B binds no host paths: %w", spec.Mounts[0].Source, engine.ErrUnsupported)
	case spec.Image != "":
		return engine.Info{}, fmt.Errorf("e2b: image %q: E2B boots templates (a template goes in Spec.Snapshot): %w", spec.Image, engine.ErrUnsupported)
	case spec.Runtime != "":
		return engine.Info{}, fmt.Errorf("e2b: runtime %q: E2B chooses its own: %w", spec.Runtime, engine.ErrUnsupported)
	}
	if spec.Timeout <= 0 {
		spec.Timeout = e.o.Timeout // said here, so the gateway's credential is bounded by it too
	}
	id, err := e.o.Gateway.Create(ctx, e, "e2b", spec, e.create)
	if err != nil {
		return engine.Info{}, err
	}
	return e.Get(ctx, id)
}

// create makes the sandbox of spec (its secrets already with the gateway) and returns
// its id once its envd answers.
func (e *Engine) create(ctx context.Context, spec engine.Spec) (string, error) {
	mounts := make([]e2bwire.VolumeMount, 0, len(spec.Volumes))
	for _, v := range spec.Volumes {
		if v.ReadOnly {
			return "", fmt.Errorf("%w: volume %q at %s: E2B mounts volumes read-write only", engine.ErrUnsupported, v.Name, v.Target)
		}
		mounts = append(mounts, e2bwire.VolumeMount{Name: v.Name, Path: v.Target})
	}
	env := map[string]string{}
	for _, kv := range spec.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return "", fmt.Errorf("invalid env entry %q", kv)
		}
		env[k] = v
	}
	timeout := spec.Timeout
	if timeout <= 0 {
		timeout = e.o.Timeout
	}
	template := e.o.Template
	if spec.Snapshot != "" {
		template = spec.Snapshot
	}
	if template == "" {
		return "", &provider.ConfigError{Msg: "E2B_TEMPLATE is required to create a sandbox"}
	}
	// E2B sandboxes never share a network with anything; either flag asks for the
	// outside, and EgressHosts (with Egress) become E2B's egress rules.
	net := spec.Network || spec.Egress
	sb, err := e.c.Create(ctx, e2bwire.NewSandbox{TemplateID: template, Timeout: seconds(timeout), Secure: true,
		AllowInternetAccess: &net, Metadata: spec.Labels, EnvVars: env, VolumeMounts: mounts, Network: egressRules(spec)})
	if err != nil {
		return "", engineErr(err)
	}
	// A fresh sandbox's envd may take a moment: the first call on it must not fail.
	if err := waitEnvd(ctx, e.c.Envd(sb)); err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_ = e.c.Kill(kctx, sb.SandboxID)
		cancel()
		return "", err
	}
	return sb.SandboxID, nil
}

// waitEnvd waits until envd answers, for at most a minute.
func waitEnvd(ctx context.Context, ev *Envd) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		err := ev.Health(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for envd: %w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// egressRules are E2B's network rules for spec.EgressHosts: the hosts are the only
// destinations (allowOut under a denyOut of everything). None without Egress (or with
// Network, the whole outside), and none when "*" allows any name.
//
// A spec that publishes no port (no Spec.Ports: a bastion agent, say) is
// created with allowPublicTraffic false: E2B's port hosts are public by default
// and would otherwise expose every port of the sandbox; now they answer only
// requests carrying the traffic access token, which the engine never hands on.
func egressRules(spec engine.Spec) *e2bwire.NetworkConfig {
	var nc *e2bwire.NetworkConfig
	if spec.Egress && !spec.Network && len(spec.EgressHosts) > 0 && !slices.Contains(spec.EgressHosts, "*") {
		nc = &e2bwire.NetworkConfig{AllowOut: slices.Clone(spec.EgressHosts), DenyOut: []string{e2bwire.DenyAll}}
	}
	if len(spec.Ports) == 0 {
		if nc == nil {
			nc = &e2bwire.NetworkConfig{}
		}
		nc.AllowPublicTraffic = new(bool)
	}
	return nc
}

func info(d e2bwire.SandboxDetail) engine.Info {
	st := engine.StateRunning
	if d.State == e2bwire.StatePaused {
		st = engine.StatePaused
	}
	var vols []engine.VolumeMount
	for _, vm := range d.VolumeMounts {
		vols = append(vols, engine.VolumeMount{Name: vm.Name, Target: vm.Path})
	}
	return engine.Info{ID: d.SandboxID, State: st, Created: d.StartedAt, Labels: d.Metadata, Isolated: true, Volumes: vols}
}

// Get describes a sandbox; a killed or expired one is engine.ErrNotFound.
func (e *Engine) Get(ctx context.Context, id string) (engine.Info, error) {
	d, err := e.c.Get(ctx, id)
	if err != nil {
		return engine.Info{}, engineErr(err)
	}
	return info(d), nil
}

// List lists the running and paused sandboxes (E2B forgets killed ones).
func (e *Engine) List(ctx context.Context) ([]engine.Info, error) {
	all, err := e.c.List(ctx, ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]engine.Info, 0, len(all))
	for _, d := range all {
		out = append(out, info(d))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (e *Engine) envd(ctx context.Context, id string) (*Envd, error) {
	s, err := e.connect(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.c.Envd(s), nil
}

// connect connects to sandbox id, which lengthens its life to at least e.o.Timeout
// from now, and its gateway credential's with it (best effort: at worst the
// credential ends with the sandbox's earlier lifetime).
func (e *Engine) connect(ctx context.Context, id string) (e2bwire.Sandbox, error) {
	s, err := e.c.Connect(ctx, id, e.o.Timeout)
	if err != nil {
		return s, engineErr(err)
	}
	if e.o.Gateway != nil {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = e.o.Gateway.Extend(gctx, id, e.o.Timeout)
		cancel()
	}
	return s, nil
}

// Exec runs argv (as a process, no shell) and streams its output; ctx cancellation
// or the timeout kills it (engine.ErrTimeout, exit code 124).
func (e *Engine) Exec(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	if len(req.Argv) == 0 {
		return -1, errors.New("exec: argv is required")
	}
	if req.TTY {
		return -1, fmt.Errorf("exec: %w: this adapter runs commands without a terminal", engine.ErrUnsupported)
	}
	ev, err := e.envd(ctx, id)
	if err != nil {
		return -1, err
	}
	env := map[string]string{}
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	p, err := ev.Start(ctx, StartOptions{Cmd: req.Argv[0], Args: req.Argv[1:], Envs: env, Cwd: req.Cwd,
		Stdin: req.Stdin != nil, Stdout: req.Stdout, Stderr: req.Stderr})
	if err != nil {
		return -1, engineErr(err)
	}
	if req.Stdin != nil {
		// The pump ends with Exec; whatever ends it (the input's end, a
		// failed send) closes the process's stdin, so nothing waits for
		// input that will not come.
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(sctx), 5*time.Second)
				_ = ev.CloseStdin(cctx, p.PID)
				cancel()
			}()
			buf := make([]byte, 32<<10)
			for {
				n, rerr := req.Stdin.Read(buf)
				if n > 0 && ev.SendInput(sctx, p.PID, buf[:n]) != nil {
					return
				}
				if rerr != nil {
					return
				}
			}
		}()
	}
	res, timedOut, err := p.WaitFor(ctx, req.Timeout)
	if timedOut {
		return 124, engine.ErrTimeout
	}
	if err != nil {
		return -1, err
	}
	if !res.Exited && res.ExitCode < 0 {
		return 137, nil // killed by a signal; envd does not say which
	}
	return res.ExitCode, nil
}

// ReadFile downloads a file.
func (e *Engine) ReadFile(ctx context.Context, id, path string) ([]byte, error) {
	ev, err := e.envd(ctx, id)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := ev.Download(ctx, path, &b); err != nil {
		return nil, fileErr(err)
	}
	return b.Bytes(), nil
}

func fileErr(err error) error {
	if IsNotFound(err) {
		return fmt.Errorf("%w: %v", fs.ErrNotExist, err)
	}
	return err
}

// WriteFile uploads a file (parents are created by envd) and sets its mode.
func (e *Engine) WriteFile(ctx context.Context, id, path string, data []byte, mode uint32) error {
	ev, err := e.envd(ctx, id)
	if err != nil {
		return err
	}
	if err := ev.Upload(ctx, path, bytes.NewReader(data)); err != nil {
		return err
	}
	if mode != 0 && fs.FileMode(mode).Perm() != 0o644 {
		r, err := ev.Run(ctx, fmt.Sprintf("chmod %o -- %s", fs.FileMode(mode).Perm(), provider.ShellEscape(path)), RunOptions{Timeout: 30 * time.Second})
		if err != nil {
			return err
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("chmod %s: %s", path, r.Stderr)
		}
	}
	return nil
}

func fileInfo(en e2bwire.EntryInfo) engine.FileInfo {
	fi := engine.FileInfo{Name: en.Name, Path: en.Path, Size: int64(en.Size), Mode: en.Mode, IsDir: en.IsDir()}
	if en.IsDir() {
		fi.Mode |= uint32(fs.ModeDir)
	}
	if en.Type == e2bwire.FileTypeSymlink {
		fi.Mode |= uint32(fs.ModeSymlink)
	}
	if en.ModifiedTime != nil {
		fi.ModTime = *en.ModifiedTime
	}
	return fi
}

// ListFiles lists a directory.
func (e *Engine) ListFiles(ctx context.Context, id, dir string) ([]engine.FileInfo, error) {
	ev, err := e.envd(ctx, id)
	if err != nil {
		return nil, err
	}
	entries, err := ev.ListDir(ctx, dir)
	if err != nil {
		return nil, fileErr(err)
	}
	out := make([]engine.FileInfo, 0, len(entries))
	for _, en := range entries {
		out = append(out, fileInfo(en))
	}
	return out, nil
}

// Stat describes a path.
func (e *Engine) Stat(ctx context.Context, id, path string) (engine.FileInfo, error) {
	ev, err := e.envd(ctx, id)
	if err != nil {
		return engine.FileInfo{}, err
	}
	en, err := ev.Stat(ctx, path)
	if err != nil {
		return engine.FileInfo{}, fileErr(err)
	}
	return fileInfo(en), nil
}

// MkdirAll creates a directory and its parents.
func (e *Engine) MkdirAll(ctx context.Context, id, path string) error {
	ev, err := e.envd(ctx, id)
	if err != nil {
		return err
	}
	return ev.MakeDir(ctx, path)
}

// Remove removes a path (a directory with its contents).
func (e *Engine) Remove(ctx context.Context, id, path string) error {
	ev, err := e.envd(ctx, id)
	if err != nil {
		return err
	}
	return fileErr(ev.Remove(ctx, path))
}

// Snapshot makes a persistent E2B snapshot.
func (e *Engine) Snapshot(ctx context.Context, id string) (string, error) {
	s, err := e.c.CreateSnapshot(ctx, id, "")
	if err != nil {
		return "", engineErr(err)
	}
	return s.SnapshotID, nil
}

// Pause pauses; a paused sandbox is success. A paused sandbox's lifetime stands
// still, and so does its gateway credential's, until Resume.
func (e *Engine) Pause(ctx context.Context, id string) error {
	if err := e.c.Pause(ctx, id); err != nil && !IsConflict(err) {
		return engineErr(err)
	}
	if err := e.o.Gateway.Extend(ctx, id, 0); err != nil {
		return fmt.Errorf("sandbox %s is paused, but its gateway credential still ends on time; pause again: %w", id, err)
	}
	return nil
}

// Resume connects, which resumes a paused sandbox.
func (e *Engine) Resume(ctx context.Context, id string) error {
	_, err := e.connect(ctx, id)
	return err
}

// Terminate kills; a gone sandbox is success. The sandbox's gateway credential dies
// with it.
func (e *Engine) Terminate(ctx context.Context, id string) error {
	return e.o.Gateway.Terminate(ctx, e, id, e.kill)
}

func (e *Engine) kill(ctx context.Context, id string) error {
	if err := e.c.Kill(ctx, id); err != nil && !IsNotFound(err) {
		return err
	}
	return nil
}

// StartDetached starts argv; the process belongs to the sandbox, not to this call:
// envd keeps it running after the stream is dropped.
func (e *Engine) StartDetached(ctx context.Context, id string, req engine.ExecRequest) (int, error) {
	if len(req.Argv) == 0 {
		return 0, errors.New("start: argv is required")
	}
	ev, err := e.envd(ctx, id)
	if err != nil {
		return 0, err
	}
	env := map[string]string{}
	for _, kv := range req.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	p, err := ev.Start(ctx, StartOptions{Cmd: req.Argv[0], Args: req.Argv[1:], Envs: env, Cwd: req.Cwd})
	if err != nil {
		return 0, engineErr(err)
	}
	p.Detach()
	return int(p.PID), nil
}

// Close releases nothing: the engine holds no connections of its own.
func (e *Engine) Close() error { return nil }
