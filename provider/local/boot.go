package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"

	"github.com/proliferate-ai/sandbox-mcp/rules"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Boot creates a sandbox directory, builds the boot plan for it and runs every step,
// blocking then background, and waits for sandbox-mcp's health. A failed fatal step
// or an unhealthy sidecar ends the boot: its processes are stopped, its directory is
// removed, and the error is a *provider.ProviderError; the returned Boot still holds
// the plan and the report.
func (p *Provider) Boot(ctx context.Context, opts provider.CreateOptions) (Boot, error) {
	fail := func(err error) (Boot, error) {
		return Boot{}, provider.FromError(err, provider.KindLocal, provider.OpCreateSandbox)
	}
	id := newID("sbx-")
	home := filepath.Join(p.o.Root, "sandboxes", id)
	paths := provider.RootedPaths(home)
	if err := os.MkdirAll(paths.Tmp, 0o755); err != nil {
		return fail(err)
	}
	var meta *provider.SessionMetadata
	if opts.SnapshotID != "" {
		m, err := p.restore(ctx, opts.SnapshotID, home)
		if err != nil {
			os.RemoveAll(home)
			return fail(err)
		}
		meta = m
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	// The local provider must reach its sidecar, so a session without a token gets one.
	env := make(map[string]string, len(opts.EnvVars)+1)
	for k, v := range opts.EnvVars {
		env[k] = v
	}
	if env[provider.EnvSandboxMCPAuthToken] == "" {
		env[provider.EnvSandboxMCPAuthToken] = newID("tok-")
	}
	opts.EnvVars = env
	token := env[provider.EnvSandboxMCPAuthToken]
	sidecarURL := "http://127.0.0.1:" + strconv.Itoa(port)
	now := p.o.Now()
	plan, err := provider.BuildPlan(opts, provider.PlanConfig{
		Kind:              provider.KindLocal,
		Paths:             paths,
		Settings:          provider.LoadHostSettings(p.o.Getenv),
		Now:               now,
		Metadata:          meta,
		SandboxMCPCommand: p.o.SandboxMCP,
		SidecarEnv: map[string]string{
			rules.EnvAddr:         "127.0.0.1:" + strconv.Itoa(port),
			rules.EnvStateDir:     paths.SidecarStateDir(),
			rules.EnvPreviewAddr:  "127.0.0.1:0",
			rules.EnvCaddySnippet: paths.UserCaddyFile(),
			rules.EnvCaddyfile:    paths.Caddyfile(),
			// Never the host's own Caddy: an admin socket inside the sandbox.
			rules.EnvCaddyAdmin: "unix/" + filepath.Join(paths.Tmp, "caddy-admin.sock"),
		},
	})
	if err != nil {
		return fail(err)
	}
	st := state{SandboxID: id, SessionID: opts.SessionID, Home: home, SidecarToken: token}
	st.Result = provider.CreateResult{SandboxID: id, SandboxMCPURL: sidecarURL,
		ExpiresAt: now.Add(provider.SandboxTimeout(p.o.Getenv)).UnixMilli()}
	r := &run{p: p, id: id, paths: paths, plan: plan, st: &st, ok: map[string]bool{}, sidecarURL: sidecarURL, token: token}
	bootErr := r.steps(ctx, "blocking", plan.Blocking)
	if bootErr == nil {
		bootErr = r.steps(ctx, "background", plan.Background)
	}
	if bootErr == nil && !r.sidecarUp {
		bootErr = errors.New("sandbox-mcp was not started")
	}
	if bootErr == nil && r.ok["start opencode"] {
		st.Result.TunnelURL = "http://127.0.0.1:" + strconv.Itoa(provider.PortOpenCode)
		// As on the cloud providers, an OpenCode that is slow to come up is a warning.
		if _, err := provider.WaitForOpenCodeReady(ctx, st.Result.TunnelURL, provider.ReadyOptions{}); err != nil {
			p.log.Warn("opencode not ready", "sandbox_id", id, "err", err)
		}
	}
	if bootErr == nil && r.ok["start caddy"] {
		st.Result.PreviewURL = "http://127.0.0.1:" + strconv.Itoa(provider.PortPreview)
	}
	if bootErr == nil {
		bootErr = p.writeState(st)
	}
	for _, w := range plan.Warnings {
		p.log.Warn("boot plan", "sandbox_id", id, "warning", w)
	}
	b := Boot{CreateResult: st.Result, Home: home, SidecarToken: token, Plan: plan, Report: st.Report}
	if bootErr != nil {
		// A failed boot leaves nothing behind: the caller gets no sandbox to terminate.
		// The report in the returned Boot says what happened.
		killSandboxProcesses(id, st.PGIDs, p.o.KillGrace)
		os.RemoveAll(home)
		os.Remove(p.statePath(id))
		b.SandboxID, b.SandboxMCPURL = "", ""
		return b, provider.FromError(bootErr, provider.KindLocal, provider.OpCreateSandbox)
	}
	return b, nil
}

// restore copies a snapshot into home and returns its metadata, with the absolute
// paths of the snapshot's home rewritten to the new one.
func (p *Provider) restore(ctx context.Context, snapshotID, home string) (*provider.SessionMetadata, error) {
	if !validID(snapshotID) {
		return nil, fmt.Errorf("snapshot %q not found", snapshotID)
	}
	src := filepath.Join(p.o.Root, "snapshots", snapshotID)
	var sm snapshotMeta
	b, err := os.ReadFile(src + ".json")
	if err != nil {
		return nil, fmt.Errorf("snapshot %q not found: %w", snapshotID, err)
	}
	if err := json.Unmarshal(b, &sm); err != nil {
		return nil, fmt.Errorf("read snapshot %q: %w", snapshotID, err)
	}
	if err := copyTree(ctx, src, home, ""); err != nil {
		return nil, err
	}
	paths := provider.RootedPaths(home)
	mb, err := os.ReadFile(paths.MetadataFile())
	if err != nil {
		return nil, nil // a sandbox without metadata restores like a legacy one
	}
	var m provider.SessionMetadata
	if json.Unmarshal(mb, &m) != nil {
		return nil, nil
	}
	if rest, ok := strings.CutPrefix(m.RepoDir, sm.Home); ok {
		m.RepoDir = home + rest
	}
	// The copy must say the same, or the next restore reads the old home.
	out, _ := json.MarshalIndent(m, "", "  ")
	if err := writeFileAtomic(paths.MetadataFile(), out, 0o644); err != nil {
		return nil, err
	}
	return &m, nil
}

// run executes one plan.
type run struct {
	p          *Provider
	id         string
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
		if !r.available(s.Requires) {
			return StatusSkipped, s.Requires + " is not installed", "", nil
		}
	}
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
	switch s.Kind {
	case provider.StepMkdir:
		return StatusOK, "", "", os.MkdirAll(s.Path, fs.FileMode(s.Mode)|0o700)
	case provider.StepWrite:
		return StatusOK, "", "", writeFileAtomic(s.Path, []byte(s.Content), fs.FileMode(s.Mode))
	case provider.StepTouch:
		if err := os.MkdirAll(filepath.Dir(s.Path), 0o755); err != nil {
			return "", "", "", err
		}
		f, err := os.OpenFile(s.Path, os.O_CREATE|os.O_WRONLY, fs.FileMode(s.Mode))
		if err != nil {
			return "", "", "", err
		}
		return StatusOK, "", "", f.Close()
	case provider.StepRemove:
		for _, p := range s.Paths {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
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
		if err := r.start(s); err != nil {
			return "", "", "", err
		}
		if s.Name == provider.StepNameSandboxMCP {
			if err := waitSidecar(ctx, r.p.client, r.sidecarURL, r.p.o.SidecarTimeout); err != nil {
				logTail, _ := os.ReadFile(r.paths.SandboxMCPLog())
				return "", "", "", fmt.Errorf("%w; log: %s", err, provider.RedactSecrets(tail(string(logTail), 2048)))
			}
			r.sidecarUp = true
		}
		return StatusOK, "", "", nil
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

// available reports whether a step's program exists: an absolute path is checked as
// a file, a name is looked up in PATH.
func (r *run) available(prog string) bool {
	if filepath.IsAbs(prog) {
		_, err := os.Stat(prog)
		return err == nil
	}
	_, err := r.p.o.LookPath(prog)
	return err == nil
}

// environ is the environment of every command of the sandbox: the host's PATH, HOME
// set to the sandbox, the plan's env, the step's env and the marker.
func (r *run) environ(extra map[string]string) []string {
	return sandboxEnviron(r.id, r.paths, r.plan.Env, extra)
}

func sandboxEnviron(id string, paths provider.Paths, base, extra map[string]string) []string {
	m := map[string]string{"PATH": os.Getenv("PATH"), "HOME": paths.Home, "USER": os.Getenv("USER"), "LANG": "C.UTF-8"}
	for k, v := range base {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	m[markerEnv] = id
	out := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// shell runs a run step's command with bash in its own process group; the whole
// group is killed when the step's timeout passes. A non-zero exit is an error.
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

// runCommand runs argv to completion under timeout in its own process group. The
// error is only for a command that could not start; exit codes are in the result
// (124 when the timeout killed it).
func (p *Provider) runCommand(ctx context.Context, id string, paths provider.Paths, argv []string, dir string, env map[string]string, timeout time.Duration) (provider.ExecResult, error) {
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := p.o.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = sandboxEnviron(id, paths, env, nil)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second // a grandchild holding the pipes open cannot block Wait
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Start()
	if err != nil {
		return provider.ExecResult{}, err
	}
	// The whole process group goes when the deadline passes, not just its leader.
	stop := context.AfterFunc(ctx, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	stop()
	res := provider.ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case ctx.Err() == context.DeadlineExceeded:
		res.ExitCode = 124
	case errors.As(err, &ee):
		res.ExitCode = ee.ExitCode()
		if res.ExitCode < 0 {
			res.ExitCode = 128 + int(ee.Sys().(syscall.WaitStatus).Signal())
		}
	default:
		return res, err
	}
	return res, nil
}

// start launches a start step's command with bash, detached in its own process group,
// stdin from /dev/null; the command itself redirects its output to its log.
func (r *run) start(s provider.Step) error {
	cmd := r.p.o.Command("bash", "-c", s.Command)
	cmd.Dir = r.paths.Home
	cmd.Env = r.environ(mergeEnv(r.plan.Env, s.Env))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	pgid := cmd.Process.Pid
	r.st.PGIDs = append(r.st.PGIDs, pgid)
	r.p.mu.Lock()
	r.p.booted[r.id] = append(r.p.booted[r.id], pgid)
	r.p.mu.Unlock()
	r.p.wg.Add(1)
	go func() {
		defer r.p.wg.Done()
		_ = cmd.Wait()
	}()
	return nil
}

// writeFileAtomic writes data to path through a temp file and a rename, creating the
// parent directories.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	if mode == 0 {
		mode = 0o644
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, mode)
}
