package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"io/fs"
	"net/url"
	"os"

	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/capped"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// tunnelPorts are the ports of an isolated sandbox published on the host: the
// sidecar API, OpenCode and Caddy's preview.
var tunnelPorts = []int{provider.PortSandboxMCP, provider.PortOpenCode, provider.PortPreview}

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
// paths, so the plan's clone commands work unchanged.
func repoMounts(opts provider.CreateOptions) []engine.Mount {
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

func tunnelURL(info engine.Info, port int) string {
	for _, t := range info.Tunnels {
		if t.Port == port {
			return "http://" + hostPort(t.Host, t.HostPort)
		}
	}
	return ""
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// Boot creates a sandbox on the engine, builds the boot plan for it and runs every
// step inside it with provider.RunPlan, blocking then background, which waits for
// sandbox-mcp's health. A failed fatal step or an unhealthy sidecar ends the boot:
// the sandbox is terminated and the error is a *provider.ProviderError; the returned
// Boot still holds the plan and the report.
func (p *Provider) Boot(ctx context.Context, opts provider.CreateOptions) (Boot, error) {
	fail := func(err error) (Boot, error) {
		return Boot{}, provider.FromError(err, provider.KindLocal, provider.OpCreateSandbox)
	}
	if opts.SessionID == "" {
		return fail(errors.New("build plan: sessionId is required"))
	}
	info, err := p.create(ctx, opts)
	if err != nil {
		return fail(err)
	}
	id := info.ID
	cleanup := func() {
		_ = p.eng.Terminate(context.Background(), id)
		os.Remove(p.statePath(id))
	}
	t, plan, err := p.prepare(ctx, info, opts)
	if err != nil {
		cleanup()
		return fail(err)
	}
	st := state{SandboxID: id, SessionID: opts.SessionID, Home: info.Home, Paths: t.paths, SidecarToken: t.token,
		Result: provider.CreateResult{SandboxID: id, SandboxMCPURL: t.sidecarURL,
			ExpiresAt: p.o.Now().Add(provider.SandboxTimeout(p.o.Getenv)).UnixMilli()}}
	for _, w := range plan.Warnings {
		p.log.Warn("boot plan", "sandbox_id", id, "warning", w)
	}
	r := provider.NewRunner(plan, t, provider.RunOptions{SidecarTimeout: p.o.SidecarTimeout,
		SidecarLog: t.paths.SandboxMCPLog(), GitMirrors: p.o.GitMirrors, Skip: p.skip, OnStep: t.onStep, Ended: t.ended})
	bootErr := r.RunPhase(ctx, provider.PhaseBlocking)
	if bootErr == nil {
		bootErr = r.RunPhase(ctx, provider.PhaseBackground)
	}
	if bootErr == nil {
		bootErr = r.SidecarError()
	}
	st.Report = r.Report()
	if bootErr == nil {
		p.publish(ctx, &st.Result, info, r)
		bootErr = p.writeState(st)
	}
	b := Boot{CreateResult: st.Result, Home: info.Home, Paths: t.paths, SidecarToken: t.token, Plan: plan, Report: st.Report}
	if bootErr != nil {
		// A failed boot leaves nothing behind: the caller gets no sandbox to terminate.
		// The report in the returned Boot says what happened.
		cleanup()
		b.SandboxID, b.SandboxMCPURL = "", ""
		return b, provider.FromError(bootErr, provider.KindLocal, provider.OpCreateSandbox)
	}
	return b, nil
}

// create creates the sandbox of a boot on the engine.
func (p *Provider) create(ctx context.Context, opts provider.CreateOptions) (engine.Info, error) {
	spec := p.spec()
	if opts.SnapshotID != "" {
		// A snapshot brings its root: an image sandbox's is an image on top of the
		// provider's Image, which the engine refuses beside it.
		spec.Image, spec.Snapshot = "", opts.SnapshotID
	}
	spec.Labels = map[string]string{"session": opts.SessionID}
	if !p.o.Unisolated {
		// Its own network (the fixed ports are its own), the outside through the
		// egress proxy (remote clones, the LLM), local repos bound in.
		spec.Ports = tunnelPorts
		spec.Egress = true
		spec.Mounts = append(spec.Mounts, repoMounts(opts)...)
	}
	p.progress("creating sandbox")
	info, err := p.eng.Create(ctx, spec)
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) && opts.SnapshotID != "" {
			return info, fmt.Errorf("snapshot %q not found: %w", opts.SnapshotID, err)
		}
		return info, err
	}
	p.progress("sandbox %s created", info.ID)
	return info, nil
}

// prepare builds the plan of a created sandbox and the Target it runs in.
func (p *Provider) prepare(ctx context.Context, info engine.Info, opts provider.CreateOptions) (*target, provider.Plan, error) {
	isolated := !p.o.Unisolated
	t := &target{p: p, id: info.ID, paths: provider.DefaultPaths(), sidecarURL: tunnelURL(info, provider.PortSandboxMCP)}
	if !isolated {
		t.paths = provider.RootedPaths(info.Home)
		if err := p.eng.MkdirAll(ctx, t.id, t.paths.Tmp); err != nil {
			return nil, provider.Plan{}, err
		}
	}
	var meta *provider.SessionMetadata
	if opts.SnapshotID != "" {
		m, err := p.restoredMetadata(ctx, t.id, opts.SnapshotID, t.paths)
		if err != nil {
			return nil, provider.Plan{}, err
		}
		meta = m
	}
	// The provider must reach its sidecar, so a session without a token gets one.
	env := make(map[string]string, len(opts.EnvVars)+1)
	for k, v := range opts.EnvVars {
		env[k] = v
	}
	if env[provider.EnvSandboxMCPAuthToken] == "" {
		env[provider.EnvSandboxMCPAuthToken] = newID("tok-")
	}
	opts.EnvVars = env
	t.token = env[provider.EnvSandboxMCPAuthToken]
	cfg := provider.PlanConfig{Kind: provider.KindLocal, Paths: t.paths, Settings: provider.LoadHostSettings(p.o.Getenv),
		Now: p.o.Now(), Metadata: meta}
	if !isolated {
		port, err := freePort()
		if err != nil {
			return nil, provider.Plan{}, err
		}
		t.sidecarURL = "http://127.0.0.1:" + strconv.Itoa(port)
		cfg.SandboxMCPCommand = p.o.SandboxMCP
		cfg.SidecarEnv = map[string]string{
			rules.EnvAddr:         "127.0.0.1:" + strconv.Itoa(port),
			rules.EnvStateDir:     t.paths.SidecarStateDir(),
			rules.EnvPreviewAddr:  "127.0.0.1:0",
			rules.EnvCaddySnippet: t.paths.UserCaddyFile(),
			rules.EnvCaddyfile:    t.paths.Caddyfile(),
			// Never the host's own Caddy: an admin socket inside the sandbox.
			rules.EnvCaddyAdmin: "unix/" + filepath.Join(t.paths.Tmp, "caddy-admin.sock"),
		}
	}
	plan, err := provider.BuildPlan(opts, cfg)
	return t, plan, err
}

// skip vetoes the steps an unisolated sandbox cannot run: OpenCode and Caddy bind
// fixed ports that several sandboxes on one host cannot share.
func (p *Provider) skip(s provider.Step) string {
	if !p.o.Unisolated {
		return ""
	}
	switch {
	case s.Name == provider.StepNameOpenCode && !p.o.RunOpenCode:
		return "disabled: OpenCode binds the fixed port 4096"
	case s.Name == provider.StepNameCaddy && !p.o.RunCaddy:
		return "disabled: the Caddyfile binds the fixed preview port 20000"
	}
	return ""
}

// publish fills the OpenCode and preview URLs of a booted sandbox whose steps ran.
func (p *Provider) publish(ctx context.Context, res *provider.CreateResult, info engine.Info, r *provider.Runner) {
	url := func(port int) string {
		if p.o.Unisolated {
			return "http://127.0.0.1:" + strconv.Itoa(port)
		}
		return tunnelURL(info, port)
	}
	if r.Succeeded(provider.StepNameOpenCode) {
		res.TunnelURL = url(provider.PortOpenCode)
		// As on the cloud providers, an OpenCode that is slow to come up is a warning.
		if _, err := provider.WaitForOpenCodeReady(ctx, res.TunnelURL, provider.ReadyOptions{}); err != nil {
			p.log.Warn("opencode not ready", "sandbox_id", info.ID, "err", err)
		}
	}
	if r.Succeeded(provider.StepNameCaddy) {
		res.PreviewURL = url(provider.PortPreview)
	}
}

func (p *Provider) progress(format string, args ...any) {
	if p.o.Progress != nil {
		fmt.Fprintf(p.o.Progress, format+"\n", args...)
	}
}

// restoredMetadata reads the session metadata the snapshot brought into the new
// sandbox. An unisolated sandbox's absolute paths are rewritten from the snapshot's
// home to the new one (an isolated sandbox's home is always /home/user).
func (p *Provider) restoredMetadata(ctx context.Context, id, snapshotID string, paths provider.Paths) (*provider.SessionMetadata, error) {
	m := provider.ParseSessionMetadata(p.eng.ReadFile(ctx, id, paths.MetadataFile()))
	if m == nil {
		return nil, nil // a sandbox without metadata restores like a legacy one
	}
	var sm snapshotMeta
	if b, err := os.ReadFile(filepath.Join(p.o.Root, "snapshots", snapshotID, "provider.json")); err == nil {
		_ = json.Unmarshal(b, &sm)
	}
	if sm.Home != "" && sm.Home != paths.Home {
		if rest, ok := strings.CutPrefix(m.RepoDir, sm.Home); ok {
			m.RepoDir = paths.Home + rest
		}
		// The copy must say the same, or the next restore reads the old home.
		out, _ := json.MarshalIndent(m, "", "  ")
		if err := p.eng.WriteFile(ctx, id, paths.MetadataFile(), out, 0o644); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// target is provider.Target over the engine: one sandbox of this provider.
type target struct {
	p          *Provider
	id         string
	paths      provider.Paths
	sidecarURL string
	token      string
}

// Exec runs bash -c command in the sandbox's home; the whole process group is killed
// when the timeout passes.
func (t *target) Exec(ctx context.Context, command string, env map[string]string, timeout time.Duration) (provider.ExecResult, error) {
	res, timedOut, err := t.p.runCommandT(ctx, t.id, []string{"bash", "-c", command}, t.paths.Home, env, timeout)
	if timedOut {
		return res, provider.ErrExecTimeout
	}
	return res, err
}

func (t *target) StartDetached(ctx context.Context, command string, env map[string]string) error {
	_, err := t.p.eng.StartDetached(ctx, t.id, engine.ExecRequest{Argv: []string{"bash", "-c", command},
		Cwd: t.paths.Home, Env: envList(env)})
	return err
}

func (t *target) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return t.p.eng.WriteFile(ctx, t.id, p, data, uint32(mode.Perm()))
}

func (t *target) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return t.p.eng.ReadFile(ctx, t.id, p)
}

func (t *target) MkdirAll(ctx context.Context, p string, mode fs.FileMode) error {
	if err := t.p.eng.MkdirAll(ctx, t.id, p); err != nil {
		return err
	}
	return t.p.eng.chmod(t.id, p, uint32(mode.Perm()))
}

func (t *target) Sidecar() (*sidecar.Client, error) {
	return sidecarClient(t.p.client, t.sidecarURL, t.token)
}

// Target is the provider.Target of a running sandbox: what the boot runs its plan
// in, to run another plan the same way.
func (p *Provider) Target(ctx context.Context, sandboxID string) (provider.Target, error) {
	st, ok := p.alive(ctx, sandboxID)
	if !ok {
		return nil, provider.NewProviderError(provider.KindLocal, provider.OpExecCommand, fmt.Sprintf("sandbox %s not found", sandboxID), false, nil)
	}
	return &target{p: p, id: sandboxID, paths: st.Paths, sidecarURL: st.Result.SandboxMCPURL, token: st.SidecarToken}, nil
}

// ended says whether the sandbox has ended (terminated during its boot).
func (t *target) ended(ctx context.Context) error {
	info, err := t.p.eng.Get(ctx, t.id)
	if err != nil {
		return err
	}
	if info.State == engine.StateDead {
		return fmt.Errorf("sandbox %s ended", t.id)
	}
	return nil
}

// onStep logs a step's outcome and prints the ones a person waits for.
func (t *target) onStep(s provider.Step, rep provider.StepReport) {
	t.p.log.Info("boot step", "sandbox_id", t.id, "step", s.Name, "status", rep.Status, "reason", rep.Reason)
	command := s.Kind == provider.StepRun || s.Kind == provider.StepStart || s.Kind == provider.StepService
	if !command && rep.Status != provider.StepFailed {
		return
	}
	line := fmt.Sprintf("  %s: %s", s.Name, rep.Status)
	if rep.Reason != "" {
		line += " (" + provider.Tail(rep.Reason, 200) + ")"
	}
	t.p.progress("%s", line)
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// runCommand runs argv to completion in the sandbox under timeout. The error is only
// for a command that could not run; exit codes are in the result (124 when the
// timeout killed it).
func (p *Provider) runCommand(ctx context.Context, id string, paths provider.Paths, argv []string, dir string, env map[string]string, timeout time.Duration) (provider.ExecResult, error) {
	res, _, err := p.runCommandT(ctx, id, argv, dir, env, timeout)
	return res, err
}

// runCommandT is runCommand that also says whether the timeout ended the command.
func (p *Provider) runCommandT(ctx context.Context, id string, argv []string, dir string, env map[string]string, timeout time.Duration) (provider.ExecResult, bool, error) {
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	stdout, stderr := &capped.Buffer{Max: 4 << 20}, &capped.Buffer{Max: 4 << 20}
	code, err := p.eng.Exec(ctx, id, engine.ExecRequest{Argv: argv, Cwd: dir, Env: envList(env), Timeout: timeout,
		Stdout: stdout, Stderr: stderr})
	res := provider.ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: code}
	if errors.Is(err, engine.ErrTimeout) {
		return res, true, nil
	}
	return res, false, err
}

// writeFileAtomic writes data to path through a temp file and a rename, creating the
// parent directories.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, mode)
}
