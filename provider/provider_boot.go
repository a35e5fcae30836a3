package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/capped"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// bootPorts are the ports of a sandbox published to the host: the sidecar API,
// OpenCode and Caddy's preview.
var bootPorts = []int{PortSandboxMCP, PortOpenCode, PortPreview}

// Boot is everything a boot produced.
type Boot struct {
	CreateResult
	// Info is the engine's description of the sandbox when it was created.
	Info engine.Info
	// Paths is the layout as the sandbox's processes see it.
	Paths Paths
	// SidecarToken authenticates calls to SandboxMCPURL.
	SidecarToken string
	Plan         Plan
	Report       []StepReport
}

// CheckSpec refuses, before any sandbox is made, what an engine says it cannot do
// honestly: an image, a runtime, volumes, host mounts or limits it does not offer.
// The error names the field and wraps engine.ErrUnsupported or engine.ErrLimit.
func CheckSpec(c engine.Capabilities, binds bool, s engine.Spec) error {
	switch {
	case s.Image != "" && !c.Images:
		return fmt.Errorf("image %q: this engine does not boot images: %w", s.Image, engine.ErrUnsupported)
	case s.Runtime != "" && !slices.Contains(c.Runtimes, s.Runtime):
		known := "none"
		if len(c.Runtimes) > 0 {
			known = strings.Join(c.Runtimes, ", ")
		}
		return fmt.Errorf("runtime %q (this engine offers: %s): %w", s.Runtime, known, engine.ErrUnsupported)
	case len(s.Volumes) > 0 && !c.Volumes:
		return fmt.Errorf("volume %q: this engine has no volumes: %w", s.Volumes[0].Name, engine.ErrUnsupported)
	case len(s.Mounts) > 0 && !binds:
		return fmt.Errorf("mount of %s: this engine binds no host paths: %w", s.Mounts[0].Source, engine.ErrUnsupported)
	case s.Name != "" && !c.Names:
		return fmt.Errorf("name %q: this engine does not name sandboxes: %w", s.Name, engine.ErrUnsupported)
	case s.Limits != (engine.Limits{}) && !c.Limits:
		return fmt.Errorf("%s: this engine cannot apply limits: %w", limitNames(s.Limits), engine.ErrLimit)
	}
	return nil
}

// limitNames names the limits l sets.
func limitNames(l engine.Limits) string {
	var out []string
	for _, x := range []struct {
		name string
		v    int64
	}{{"memory", l.MemoryBytes}, {"cpus", l.CPUMillis}, {"pids", l.Pids}, {"disk", l.DiskBytes}} {
		if x.v != 0 {
			out = append(out, x.name)
		}
	}
	return strings.Join(out, ", ") + " limit"
}

// bindsHostPaths reports whether the engine honours Spec.Mounts.
func (p *Provider) bindsHostPaths() bool {
	hb, ok := p.eng.(engine.HostBinder)
	return ok && hb.BindsHostPaths()
}

// Boot creates a sandbox from opts.Spec, builds the boot plan for it and runs every
// step inside it, blocking then background, which waits for sandbox-mcp's health. A
// restore (opts.SnapshotID) resumes a paused sandbox of that id on an engine that
// pauses, else starts from the snapshot; when that fails, a fresh sandbox is made and
// CreateResult.RestoreFallback says why. A failed fatal step or an unhealthy sidecar
// ends the boot: the sandbox is terminated and the error is a *ProviderError; the
// returned Boot still holds the plan and the report.
func (p *Provider) Boot(ctx context.Context, opts CreateOptions) (Boot, error) {
	fail := func(err error) (Boot, error) { return Boot{}, p.fail(OpCreateSandbox, err) }
	if opts.SessionID == "" {
		return fail(errors.New("build plan: sessionId is required"))
	}
	// The provider must reach its sidecar, so a session without a token gets one.
	env := make(map[string]string, len(opts.EnvVars)+1)
	for k, v := range opts.EnvVars {
		env[k] = v
	}
	if env[EnvSandboxMCPAuthToken] == "" {
		env[EnvSandboxMCPAuthToken] = randomID("tok-")
	}
	opts.EnvVars = env
	token := env[EnvSandboxMCPAuthToken]

	t := &engineTarget{p: p, token: token}
	var sidecarEnv map[string]string
	if !p.caps.Isolated {
		// Without isolation the sandbox shares the host's network: the sidecar gets a
		// free loopback port, and a URL the sandbox's own commands find it at.
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		t.sidecarURL = "http://127.0.0.1:" + strconv.Itoa(port)
		sidecarEnv = map[string]string{rules.EnvAddr: "127.0.0.1:" + strconv.Itoa(port), rules.EnvPreviewAddr: "127.0.0.1:0"}
	}
	spec, err := p.spec(opts, token, t.sidecarURL)
	if err != nil {
		return fail(err)
	}
	info, resumed, fallback, err := p.create(ctx, opts, spec)
	if err != nil {
		return fail(llmKeysHint(spec, err))
	}
	if fallback != "" {
		opts.SnapshotID = ""
	}
	t.id, t.paths = info.ID, p.paths(info)
	cleanup := func() {
		if resumed {
			return // not ours to end: the caller paused it and resumes it again
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := p.eng.Terminate(cctx, info.ID); err != nil {
			p.log.Warn("terminate after a failed boot", "sandbox_id", info.ID, "err", RedactSecrets(err.Error()))
		}
	}
	plan, err := p.plan(ctx, t, opts, sidecarEnv)
	if err != nil {
		cleanup()
		return fail(err)
	}
	if p.caps.Isolated {
		if t.sidecarURL, err = p.portURL(ctx, info, PortSandboxMCP); err != nil {
			cleanup()
			return fail(fmt.Errorf("find the sidecar's URL: %w", err))
		}
	}
	for _, w := range plan.Warnings {
		p.log.Warn("boot plan", "sandbox_id", info.ID, "warning", w)
	}
	r := NewRunner(plan, t, RunOptions{SidecarTimeout: p.o.SidecarTimeout, SidecarLog: t.paths.SandboxMCPLog(),
		GitMirrors: p.o.GitMirrors, Skip: p.skip, OnStep: t.onStep, Ended: t.ended})
	bootErr := r.RunPhase(ctx, PhaseBlocking)
	if bootErr == nil {
		bootErr = r.RunPhase(ctx, PhaseBackground)
	}
	if bootErr == nil {
		bootErr = r.SidecarError()
	}
	b := Boot{Info: info, Paths: t.paths, SidecarToken: token, Plan: plan, Report: r.Report()}
	if bootErr != nil {
		// A failed boot leaves nothing behind: the caller gets no sandbox to terminate.
		cleanup()
		return b, p.fail(OpCreateSandbox, bootErr)
	}
	b.CreateResult = p.result(ctx, info, r.Succeeded(StepNameOpenCode), r.Succeeded(StepNameCaddy))
	b.SandboxMCPURL = t.sidecarURL
	b.RestoreFallback = fallback
	if spec.Timeout > 0 {
		b.ExpiresAt = info.Created.Add(spec.Timeout).UnixMilli()
		if info.Created.IsZero() {
			b.ExpiresAt = p.o.Now().Add(spec.Timeout).UnixMilli()
		}
	}
	if b.TunnelURL != "" && r.Succeeded(StepNameOpenCode) {
		// As ever, an OpenCode that is slow to come up is a warning.
		if _, err := WaitForOpenCodeReady(ctx, b.TunnelURL, ReadyOptions{Client: p.o.HTTPClient, MaxWait: p.o.ReadyWait}); err != nil {
			p.log.Warn("opencode not ready", "sandbox_id", info.ID, "err", RedactSecrets(err.Error()))
		}
	}
	return b, nil
}

// spec is the engine.Spec of a boot: the caller's, with what the boot needs added
// (the LLM keys as secrets among them).
func (p *Provider) spec(opts CreateOptions, token, sidecarURL string) (engine.Spec, error) {
	spec := opts.Spec
	spec.Env = slices.Clone(spec.Env)
	spec.Mounts = slices.Clone(spec.Mounts)
	spec.Labels = map[string]string{}
	for k, v := range opts.Spec.Labels {
		spec.Labels[k] = v
	}
	spec.Labels[rules.LabelSession] = opts.SessionID
	// The sandbox's own commands (sandboxctl exec, terminal) reach its sidecar.
	spec.Env = append(spec.Env, EnvSandboxMCPAuthToken+"="+token)
	if sidecarURL != "" {
		spec.Env = append(spec.Env, rules.EnvSidecarURL+"="+sidecarURL)
	}
	if spec.Timeout == 0 {
		spec.Timeout = p.o.Timeout
	}
	keys, err := p.llmSecrets(opts)
	if err != nil {
		return spec, err
	}
	spec.Secrets = append(slices.Clip(spec.Secrets), keys...)
	if p.caps.Isolated {
		// Its own network (the fixed ports are its own), the outside through the
		// engine's egress (remote clones, the LLM).
		for _, port := range p.publishedPorts() {
			if !slices.Contains(spec.Ports, port) {
				spec.Ports = append(spec.Ports, port)
			}
		}
		if !spec.Network {
			spec.Egress = true
		}
	}
	if p.caps.Isolated && p.bindsHostPaths() {
		// Local repositories are bound in read-only at their host paths, so the plan's
		// clone commands work unchanged.
		spec.Mounts = append(spec.Mounts, repoMounts(opts)...)
	}
	switch {
	case opts.SnapshotID != "":
		// A snapshot brings its root: an image sandbox's is an image of its own.
		spec.Image, spec.Snapshot = "", opts.SnapshotID
	case opts.BaseSnapshotID != "" && spec.Snapshot == "":
		// The platform's base snapshot: a root to start from, not a session to restore.
		spec.Image, spec.Snapshot = "", opts.BaseSnapshotID
	}
	return spec, CheckSpec(p.caps, p.bindsHostPaths(), spec)
}

// create makes the sandbox of a boot: a paused one resumed, one from the snapshot,
// or (when a restore fails) a fresh one, with the reason in fallback.
func (p *Provider) create(ctx context.Context, opts CreateOptions, spec engine.Spec) (info engine.Info, resumed bool, fallback string, err error) {
	if opts.SnapshotID != "" && p.caps.Pause {
		if in, gerr := p.eng.Get(ctx, opts.SnapshotID); gerr == nil && in.State == engine.StatePaused {
			p.progress("resuming sandbox %s", in.ID)
			if err := p.eng.Resume(ctx, in.ID); err != nil {
				return in, false, "", fmt.Errorf("resume sandbox %s: %w", in.ID, err)
			}
			info, err := p.eng.Get(ctx, in.ID)
			return info, true, "", err
		}
	}
	p.progress("creating sandbox")
	info, err = p.eng.Create(ctx, spec)
	if err != nil && spec.Snapshot != "" && !opts.SnapshotRequired && ctx.Err() == nil && !errors.Is(err, engine.ErrLimit) &&
		!errors.Is(err, engine.ErrUnsupported) {
		fallback = RedactSecrets("restore from snapshot " + spec.Snapshot + " failed: " + err.Error())
		p.log.Warn("restore failed; creating a fresh sandbox", "session_id", opts.SessionID, "snapshot_id", spec.Snapshot, "err", fallback)
		spec.Snapshot, spec.Image = "", opts.Spec.Image
		info, err = p.eng.Create(ctx, spec)
	}
	if err != nil && spec.Snapshot != "" && errors.Is(err, engine.ErrNotFound) {
		return info, false, "", fmt.Errorf("snapshot %q not found: %w", spec.Snapshot, err)
	}
	if err != nil {
		return info, false, "", fmt.Errorf("create sandbox: %w", err)
	}
	p.progress("sandbox %s created", info.ID)
	return info, false, fallback, nil
}

// plan builds the boot plan of a created sandbox.
func (p *Provider) plan(ctx context.Context, t *engineTarget, opts CreateOptions, sidecarEnv map[string]string) (Plan, error) {
	if !p.caps.Isolated {
		if err := p.eng.MkdirAll(ctx, t.id, t.paths.Tmp); err != nil {
			return Plan{}, err
		}
		sidecarEnv[rules.EnvStateDir] = t.paths.SidecarStateDir()
		sidecarEnv[rules.EnvCaddySnippet] = t.paths.UserCaddyFile()
		sidecarEnv[rules.EnvCaddyfile] = t.paths.Caddyfile()
		// Never the host's own Caddy: an admin socket inside the sandbox.
		sidecarEnv[rules.EnvCaddyAdmin] = "unix/" + filepath.Join(t.paths.Tmp, "caddy-admin.sock")
	}
	var meta *SessionMetadata
	if opts.SnapshotID != "" {
		m, err := p.restoredMetadata(ctx, t)
		if err != nil {
			return Plan{}, err
		}
		meta = m
	}
	return BuildPlan(opts, PlanConfig{Kind: p.o.Kind, Paths: t.paths, Settings: LoadHostSettings(p.o.Getenv), Now: p.o.Now(),
		Metadata: meta, SandboxMCPCommand: p.o.SandboxMCPCommand, SidecarEnv: sidecarEnv, LLMKeysAsSecrets: !p.o.LLMKeysInSandbox})
}

// restoredMetadata reads the session metadata a snapshot brought into the sandbox. The
// absolute paths of a sandbox without isolation (rooted in its host directory) are
// moved from the snapshot's home to the new one, in the copy too.
func (p *Provider) restoredMetadata(ctx context.Context, t *engineTarget) (*SessionMetadata, error) {
	m := ParseSessionMetadata(p.eng.ReadFile(ctx, t.id, t.paths.MetadataFile()))
	if m == nil || p.caps.Isolated {
		return m, nil // a sandbox without metadata restores like a legacy one
	}
	i := strings.Index(m.RepoDir, "/workspace")
	if i < 0 || m.RepoDir[:i] == t.paths.Home {
		return m, nil
	}
	m.RepoDir = t.paths.Home + m.RepoDir[i:]
	out, _ := json.MarshalIndent(m, "", "  ")
	if err := p.eng.WriteFile(ctx, t.id, t.paths.MetadataFile(), out, 0o644); err != nil {
		return nil, err
	}
	return m, nil
}

// skip vetoes the steps a sandbox without isolation cannot run: OpenCode and Caddy
// bind fixed ports that several sandboxes on one host cannot share.
func (p *Provider) skip(s Step) string {
	if p.caps.Isolated {
		return ""
	}
	switch {
	case s.Name == StepNameOpenCode && !p.o.RunOpenCode:
		return "disabled: OpenCode binds the fixed port 4096"
	case s.Name == StepNameCaddy && !p.o.RunCaddy:
		return "disabled: the Caddyfile binds the fixed preview port 20000"
	}
	return ""
}

// result is the CreateResult of a running sandbox: its URLs, and its SSH tunnel on an
// engine that makes one. An isolated sandbox's OpenCode and preview ports are its own
// and tunnelled from create on, so their URLs are published whether or not the boot
// started OpenCode and Caddy (as the platform expects); a sandbox without isolation
// publishes them only when those run.
func (p *Provider) result(ctx context.Context, info engine.Info, openCode, preview bool) CreateResult {
	res := CreateResult{SandboxID: info.ID}
	url := func(port int) string {
		if !p.caps.Isolated {
			return "http://127.0.0.1:" + strconv.Itoa(port)
		}
		u, err := p.portURL(ctx, info, port)
		if err != nil {
			p.log.Warn("port url", "sandbox_id", info.ID, "port", port, "err", err)
		}
		return u
	}
	if p.caps.Isolated {
		res.SandboxMCPURL = url(PortSandboxMCP)
	}
	if openCode || p.caps.Isolated {
		res.TunnelURL = url(PortOpenCode)
	}
	if preview || p.caps.Isolated {
		res.PreviewURL = url(PortPreview)
	}
	if i := slices.IndexFunc(info.Tunnels, func(t engine.Tunnel) bool { return t.Port == PortSSH }); p.caps.SSH && i >= 0 {
		res.SSHHost, res.SSHPort = info.Tunnels[i].Host, info.Tunnels[i].HostPort
	}
	return res
}

// portURL is a URL that reaches port inside the sandbox from the host: the engine's
// (engine.PortURLer), else http:// to its tunnel.
func (p *Provider) portURL(ctx context.Context, info engine.Info, port int) (string, error) {
	if p.noPorts {
		return dialURL(info.ID, port), nil
	}
	if pu, ok := p.eng.(engine.PortURLer); ok {
		return pu.PortURL(ctx, info.ID, port)
	}
	for _, t := range info.Tunnels {
		if t.Port == port {
			return "http://" + net.JoinHostPort(t.Host, strconv.Itoa(t.HostPort)), nil
		}
	}
	return "", fmt.Errorf("sandbox %s has no tunnel for port %d", info.ID, port)
}

func (p *Provider) progress(format string, args ...any) {
	if p.o.Progress != nil {
		fmt.Fprintf(p.o.Progress, format+"\n", args...)
	}
}

// run runs req to completion with capped output. The error is for a command that
// could not run; a timeout is exit code 124 and timedOut.
func (p *Provider) run(ctx context.Context, id string, req engine.ExecRequest) (res ExecResult, timedOut bool, err error) {
	stdout, stderr := &capped.Buffer{Max: 4 << 20}, &capped.Buffer{Max: 4 << 20}
	req.Stdout, req.Stderr = stdout, stderr
	code, err := p.eng.Exec(ctx, id, req)
	res = ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: code}
	if errors.Is(err, engine.ErrTimeout) {
		res.ExitCode = 124
		return res, true, nil
	}
	return res, false, err
}

func envList(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]string, 0, len(m))
	for _, k := range keys {
		out = append(out, k+"="+m[k])
	}
	return out
}

// localRepoPath returns the host directory of a repo given as a local path or a
// file:// URL; "" for a remote URL.
func localRepoPath(repoURL string) string {
	switch {
	case strings.HasPrefix(repoURL, "file://"):
		u, err := url.Parse(repoURL)
		if err != nil || u.Path == "" {
			return ""
		}
		return filepath.Clean(u.Path)
	case filepath.IsAbs(repoURL):
		return filepath.Clean(repoURL)
	}
	return ""
}

// repoMounts binds the local repos of opts read-only into the sandbox at their host
// paths.
func repoMounts(opts CreateOptions) []engine.Mount {
	var out []engine.Mount
	seen := map[string]bool{}
	for _, r := range opts.Repos {
		p := localRepoPath(r.RepoURL)
		if p == "" || seen[p] {
			continue
		}
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			continue // the clone step reports the missing repo
		}
		seen[p] = true
		out = append(out, engine.Mount{Source: p, Target: p, ReadOnly: true})
	}
	return out
}

func randomID(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
