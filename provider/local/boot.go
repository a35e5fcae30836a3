package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/capped"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
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
// step inside it, blocking then background, and waits for sandbox-mcp's health. A
// failed fatal step or an unhealthy sidecar ends the boot: the sandbox is terminated
// and the error is a *provider.ProviderError; the returned Boot still holds the plan
// and the report.
func (p *Provider) Boot(ctx context.Context, opts provider.CreateOptions) (Boot, error) {
	fail := func(err error) (Boot, error) {
		return Boot{}, provider.FromError(err, provider.KindLocal, provider.OpCreateSandbox)
	}
	if opts.SessionID == "" {
		return fail(errors.New("build plan: sessionId is required"))
	}
	isolated := !p.o.Unisolated
	spec := engine.Spec{Snapshot: opts.SnapshotID, Labels: map[string]string{"session": opts.SessionID}}
	if isolated {
		// Its own network (the fixed ports are its own), the outside through the
		// egress proxy (remote clones, the LLM), local repos bound in.
		spec.Ports = tunnelPorts
		spec.Egress = true
		spec.Mounts = repoMounts(opts)
	}
	p.progress("creating sandbox")
	info, err := p.eng.Create(ctx, spec)
	if err != nil {
		if errors.Is(err, engine.ErrNotFound) && opts.SnapshotID != "" {
			return fail(fmt.Errorf("snapshot %q not found: %w", opts.SnapshotID, err))
		}
		return fail(err)
	}
	id := info.ID
	p.progress("sandbox %s created", id)
	paths := provider.DefaultPaths()
	if !isolated {
		paths = provider.RootedPaths(info.Home)
		if err := p.eng.MkdirAll(ctx, id, paths.Tmp); err != nil {
			_ = p.eng.Terminate(context.Background(), id)
			return fail(err)
		}
	}
	st := state{SandboxID: id, SessionID: opts.SessionID, Home: info.Home, Paths: paths}
	cleanup := func() {
		_ = p.eng.Terminate(context.Background(), id)
		os.Remove(p.statePath(id))
	}
	var meta *provider.SessionMetadata
	if opts.SnapshotID != "" {
		m, err := p.restoredMetadata(ctx, id, opts.SnapshotID, paths)
		if err != nil {
			cleanup()
			return fail(err)
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
	token := env[provider.EnvSandboxMCPAuthToken]
	cfg := provider.PlanConfig{Kind: provider.KindLocal, Paths: paths, Settings: provider.LoadHostSettings(p.o.Getenv),
		Now: p.o.Now(), Metadata: meta}
	sidecarURL := tunnelURL(info, provider.PortSandboxMCP)
	if !isolated {
		port, err := freePort()
		if err != nil {
			cleanup()
			return fail(err)
		}
		sidecarURL = "http://127.0.0.1:" + strconv.Itoa(port)
		cfg.SandboxMCPCommand = p.o.SandboxMCP
		cfg.SidecarEnv = map[string]string{
			rules.EnvAddr:         "127.0.0.1:" + strconv.Itoa(port),
			rules.EnvStateDir:     paths.SidecarStateDir(),
			rules.EnvPreviewAddr:  "127.0.0.1:0",
			rules.EnvCaddySnippet: paths.UserCaddyFile(),
			rules.EnvCaddyfile:    paths.Caddyfile(),
			// Never the host's own Caddy: an admin socket inside the sandbox.
			rules.EnvCaddyAdmin: "unix/" + filepath.Join(paths.Tmp, "caddy-admin.sock"),
		}
	}
	plan, err := provider.BuildPlan(opts, cfg)
	if err != nil {
		cleanup()
		return fail(err)
	}
	st.SidecarToken = token
	st.Result = provider.CreateResult{SandboxID: id, SandboxMCPURL: sidecarURL,
		ExpiresAt: cfg.Now.Add(provider.SandboxTimeout(p.o.Getenv)).UnixMilli()}
	r := &run{p: p, id: id, isolated: isolated, paths: paths, plan: plan, st: &st, ok: map[string]bool{}, sidecarURL: sidecarURL, token: token}
	bootErr := r.steps(ctx, "blocking", plan.Blocking)
	if bootErr == nil {
		bootErr = r.steps(ctx, "background", plan.Background)
	}
	if bootErr == nil && !r.sidecarUp {
		bootErr = errors.New("sandbox-mcp was not started")
		for _, rep := range st.Report {
			if rep.Name == provider.StepNameSandboxMCP && rep.Reason != "" {
				bootErr = fmt.Errorf("sandbox-mcp was not started: %s", rep.Reason)
			}
		}
	}
	if bootErr == nil && r.ok["start opencode"] {
		st.Result.TunnelURL = "http://127.0.0.1:" + strconv.Itoa(provider.PortOpenCode)
		if isolated {
			st.Result.TunnelURL = tunnelURL(info, provider.PortOpenCode)
		}
		// As on the cloud providers, an OpenCode that is slow to come up is a warning.
		if _, err := provider.WaitForOpenCodeReady(ctx, st.Result.TunnelURL, provider.ReadyOptions{}); err != nil {
			p.log.Warn("opencode not ready", "sandbox_id", id, "err", err)
		}
	}
	if bootErr == nil && r.ok["start caddy"] {
		st.Result.PreviewURL = "http://127.0.0.1:" + strconv.Itoa(provider.PortPreview)
		if isolated {
			st.Result.PreviewURL = tunnelURL(info, provider.PortPreview)
		}
	}
	if bootErr == nil {
		bootErr = p.writeState(st)
	}
	for _, w := range plan.Warnings {
		p.log.Warn("boot plan", "sandbox_id", id, "warning", w)
	}
	b := Boot{CreateResult: st.Result, Home: info.Home, Paths: paths, SidecarToken: token, Plan: plan, Report: st.Report}
	if bootErr != nil {
		// A failed boot leaves nothing behind: the caller gets no sandbox to terminate.
		// The report in the returned Boot says what happened.
		cleanup()
		b.SandboxID, b.SandboxMCPURL = "", ""
		return b, provider.FromError(bootErr, provider.KindLocal, provider.OpCreateSandbox)
	}
	return b, nil
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

// run executes one plan.
type run struct {
	p          *Provider
	id         string
	isolated   bool
	paths      provider.Paths
	plan       provider.Plan
	st         *state
	ok         map[string]bool
	sidecarURL string
	token      string
	sidecarUp  bool
}

func (r *run) steps(ctx context.Context, phase string, steps []provider.Step) error {
	for _, s := range steps {
		start := time.Now()
		rep := StepReport{Name: s.Name, Phase: phase}
		status, reason, output, err := r.step(ctx, s)
		rep.Status, rep.Reason, rep.Output = status, reason, output
		if err != nil {
			rep.Status = StatusFailed
			rep.Reason = provider.RedactSecrets(err.Error())
		}
		rep.DurationMs = time.Since(start).Milliseconds()
		r.st.Report = append(r.st.Report, rep)
		r.ok[s.Name] = rep.Status == StatusOK
		r.p.log.Info("boot step", "sandbox_id", r.id, "step", s.Name, "status", rep.Status, "reason", rep.Reason)
		if rep.Status != StatusSkipped || s.Kind == provider.StepRun || s.Kind == provider.StepStart {
			line := fmt.Sprintf("  %s: %s", s.Name, rep.Status)
			if rep.Reason != "" {
				line += " (" + tail(rep.Reason, 200) + ")"
			}
			if s.Kind == provider.StepRun || s.Kind == provider.StepStart || s.Kind == provider.StepService || rep.Status == StatusFailed {
				r.p.progress("%s", line)
			}
		}
		if err != nil && s.Fatal {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
	}
	return nil
}

// step runs s and says how it went; err is a failure, a skip is not.
func (r *run) step(ctx context.Context, s provider.Step) (status, reason, output string, err error) {
	for _, dep := range s.IfAllOK {
		if !r.ok[dep] {
			return StatusSkipped, "step " + dep + " did not succeed", "", nil
		}
	}
	if s.Requires != "" && s.Kind != provider.StepService {
		if !r.available(ctx, s.Requires) {
			return StatusSkipped, s.Requires + " is not installed", "", nil
		}
	}
	if !r.isolated {
		switch s.Name {
		case "start opencode":
			if !r.p.o.RunOpenCode {
				return StatusSkipped, "disabled: OpenCode binds the fixed port 4096", "", nil
			}
		case "start caddy":
			if !r.p.o.RunCaddy {
				return StatusSkipped, "disabled: the Caddyfile binds the fixed preview port 20000", "", nil
			}
		}
	}
	e := r.p.eng
	switch s.Kind {
	case provider.StepMkdir:
		if err := e.MkdirAll(ctx, r.id, s.Path); err != nil {
			return "", "", "", err
		}
		return StatusOK, "", "", e.chmod(r.id, s.Path, uint32(s.Mode)|0o700)
	case provider.StepWrite:
		return StatusOK, "", "", e.WriteFile(ctx, r.id, s.Path, []byte(s.Content), uint32(s.Mode))
	case provider.StepTouch:
		if _, err := e.Stat(ctx, r.id, s.Path); err == nil {
			return StatusOK, "", "", nil
		}
		return StatusOK, "", "", e.WriteFile(ctx, r.id, s.Path, nil, uint32(s.Mode))
	case provider.StepRemove:
		for _, p := range s.Paths {
			if err := e.Remove(ctx, r.id, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return "", "", "", err
			}
		}
		return StatusOK, "", "", nil
	case provider.StepRun:
		out, err := r.shell(ctx, s)
		if err != nil && s.Fallback != nil {
			var fout string
			fout, err = r.shell(ctx, *s.Fallback)
			out += fout
		}
		return StatusOK, "", out, err
	case provider.StepStart:
		if _, err := e.StartDetached(ctx, r.id, engine.ExecRequest{Argv: []string{"bash", "-c", s.Command},
			Cwd: r.paths.Home, Env: envList(mergeEnv(r.plan.Env, s.Env))}); err != nil {
			return "", "", "", err
		}
		if s.Name == provider.StepNameSandboxMCP {
			if err := waitSidecar(ctx, r.p.client, r.sidecarURL, r.p.o.SidecarTimeout); err != nil {
				logTail, _ := e.ReadFile(ctx, r.id, r.paths.SandboxMCPLog())
				return "", "", "", fmt.Errorf("%w; log: %s", err, provider.RedactSecrets(tail(string(logTail), 2048)))
			}
			r.sidecarUp = true
		}
		return StatusOK, "", "", nil
	case provider.StepGitBundle:
		// The host fetches with the token; the sandbox only ever sees a bundle.
		ctx, cancel := context.WithTimeout(ctx, s.Timeout())
		defer cancel()
		out, err := provider.ExecGitBundle(ctx, &sandboxExecutor{p: r.p, id: r.id, paths: r.paths}, r.p.o.GitMirrors, s)
		return StatusOK, "", out, err
	case provider.StepService:
		// The local equivalent of `proliferate services start`: the same request, sent
		// to this sandbox's sandbox-mcp directly.
		if !r.sidecarUp {
			return StatusSkipped, "sandbox-mcp is not running", "", nil
		}
		ctx, cancel := context.WithTimeout(ctx, s.Timeout())
		defer cancel()
		return StatusOK, "", "", startService(ctx, r.p.client, r.sidecarURL, r.token, *s.Service)
	}
	return "", "", "", fmt.Errorf("unknown step kind %q", s.Kind)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// available reports whether a step's program exists in the sandbox: an absolute path
// is checked as a file, a name is looked up in the sandbox's PATH.
func (r *run) available(ctx context.Context, prog string) bool {
	if !r.isolated {
		if filepath.IsAbs(prog) {
			_, err := os.Stat(prog)
			return err == nil
		}
		_, err := r.p.o.LookPath(prog)
		return err == nil
	}
	if path.IsAbs(prog) {
		_, err := r.p.eng.Stat(ctx, r.id, prog)
		return err == nil
	}
	for _, dir := range filepath.SplitList(sandboxPATH) {
		if fi, err := r.p.eng.Stat(ctx, r.id, path.Join(dir, prog)); err == nil && !fi.IsDir && fi.Mode&0o111 != 0 {
			return true
		}
	}
	return false
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// shell runs a run step's command with bash; the whole process group is killed when
// the step's timeout passes. A non-zero exit is an error.
func (r *run) shell(ctx context.Context, s provider.Step) (string, error) {
	res, err := r.p.runCommand(ctx, r.id, r.paths, []string{"bash", "-c", s.Command}, r.paths.Home, mergeEnv(r.plan.Env, s.Env), s.Timeout())
	out := provider.RedactSecrets(provider.CapOutput(res.Stdout+res.Stderr, 4096))
	if err != nil {
		return out, err
	}
	if res.ExitCode != 0 {
		return out, fmt.Errorf("exit status %d: %s", res.ExitCode, out)
	}
	return out, nil
}

func mergeEnv(a, b map[string]string) map[string]string {
	m := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
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

var _ = io.Discard
