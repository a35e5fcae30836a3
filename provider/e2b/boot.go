package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// StepReport is how one boot step went; the provider logs one per step.
type StepReport struct {
	Name   string
	Phase  string
	Status string // ok, skipped, failed
	Reason string
}

// boot runs the boot plan of a created or resumed sandbox through its envd and
// returns its result. Both phases run before it returns (the platform's TS provider
// left the background phase running; a Go caller that wants that runs CreateSandbox
// in a goroutine), and sandbox-mcp must come up healthy.
func (p *Provider) boot(ctx context.Context, sb Sandbox, opts provider.CreateOptions) (provider.CreateResult, error) {
	e := p.client.Envd(sb)
	if err := waitEnvd(ctx, e); err != nil {
		return provider.CreateResult{}, err
	}
	var meta *provider.SessionMetadata
	if opts.SnapshotID != "" {
		meta = readMetadata(ctx, e)
	}
	mcpURL, err := p.tunnel(ctx, sb.SandboxID, provider.PortSandboxMCP)
	if err != nil {
		return provider.CreateResult{}, fmt.Errorf("resolve sandbox-mcp tunnel: %w", err)
	}
	plan, err := provider.BuildPlan(opts, provider.PlanConfig{
		Kind: provider.KindE2B, Paths: provider.DefaultPaths(), Settings: provider.LoadHostSettings(p.o.Getenv),
		Now: p.o.Now(), Metadata: meta, SandboxMCPCommand: p.o.SandboxMCPCommand,
		// E2B reaches a port on the sandbox's address, never its loopback.
		SidecarEnv: map[string]string{rules.EnvAddr: "0.0.0.0:" + strconv.Itoa(provider.PortSandboxMCP)},
	})
	if err != nil {
		return provider.CreateResult{}, err
	}
	for _, w := range plan.Warnings {
		p.log.Warn("boot plan", "sandbox_id", sb.SandboxID, "warning", w)
	}
	r := &bootRun{p: p, e: e, id: sb.SandboxID, plan: plan, ok: map[string]bool{}, have: map[string]bool{},
		mcpURL: mcpURL, token: opts.EnvVars[provider.EnvSandboxMCPAuthToken]}
	if err := r.steps(ctx, "blocking", plan.Blocking); err != nil {
		return provider.CreateResult{}, err
	}
	if err := r.steps(ctx, "background", plan.Background); err != nil {
		return provider.CreateResult{}, err
	}
	if !r.sidecarUp {
		return provider.CreateResult{}, errors.New("sandbox-mcp was not started (is it installed in the template?)")
	}
	res := provider.CreateResult{SandboxID: sb.SandboxID, SandboxMCPURL: mcpURL}
	if r.ok["start opencode"] {
		if res.TunnelURL, err = p.tunnel(ctx, sb.SandboxID, provider.PortOpenCode); err != nil {
			return res, err
		}
		if _, err := provider.WaitForOpenCodeReady(ctx, res.TunnelURL, provider.ReadyOptions{}); err != nil {
			p.log.Warn("opencode not ready", "sandbox_id", sb.SandboxID, "err", err)
		}
	}
	if res.PreviewURL, err = p.tunnel(ctx, sb.SandboxID, provider.PortPreview); err != nil {
		return res, err
	}
	return res, nil
}

// waitEnvd waits until envd answers; a fresh or resumed sandbox may take a moment.
func waitEnvd(ctx context.Context, e *Envd) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		err := e.Health(ctx)
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

type bootRun struct {
	p         *Provider
	e         *Envd
	id        string
	plan      provider.Plan
	ok        map[string]bool
	have      map[string]bool // program -> installed, cached
	mcpURL    string
	token     string
	sidecarUp bool
}

func (r *bootRun) steps(ctx context.Context, phase string, steps []provider.Step) error {
	for _, s := range steps {
		rep := StepReport{Name: s.Name, Phase: phase}
		status, reason, err := r.step(ctx, s)
		rep.Status, rep.Reason = status, reason
		if err != nil {
			rep.Status, rep.Reason = "failed", provider.RedactSecrets(err.Error())
		}
		r.ok[s.Name] = rep.Status == "ok"
		r.p.log.Info("boot step", "sandbox_id", r.id, "phase", phase, "step", s.Name, "status", rep.Status, "reason", rep.Reason)
		if err != nil && s.Fatal {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (r *bootRun) env(extra map[string]string) map[string]string {
	m := make(map[string]string, len(r.plan.Env)+len(extra))
	for k, v := range r.plan.Env {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// installed reports whether a step's program exists in the sandbox.
func (r *bootRun) installed(ctx context.Context, prog string) (bool, error) {
	if v, ok := r.have[prog]; ok {
		return v, nil
	}
	check := "command -v -- " + provider.ShellEscape(prog) + " >/dev/null 2>&1"
	if path.IsAbs(prog) {
		check = "test -x " + provider.ShellEscape(prog)
	}
	res, err := r.e.Run(ctx, check, RunOptions{Timeout: 10 * time.Second})
	if err != nil {
		return false, err
	}
	r.have[prog] = res.ExitCode == 0
	return r.have[prog], nil
}

// run runs a command step and its fallback; a non-zero exit is an error.
func (r *bootRun) run(ctx context.Context, s provider.Step) error {
	res, err := r.e.Run(ctx, s.Command, RunOptions{Envs: r.env(s.Env), Timeout: s.Timeout(), MaxOutput: 64 << 10})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		out := provider.CapOutput(res.Stdout+res.Stderr, 4096)
		if res.TimedOut {
			return fmt.Errorf("timed out after %s: %s", s.Timeout(), out)
		}
		return fmt.Errorf("exit status %d: %s", res.ExitCode, out)
	}
	return nil
}

func (r *bootRun) chmod(ctx context.Context, p string, mode provider.Mode, def fs.FileMode) error {
	if mode == 0 || fs.FileMode(mode) == def {
		return nil
	}
	res, err := r.e.Run(ctx, "chmod "+strconv.FormatUint(uint64(mode), 8)+" "+provider.ShellEscape(p), RunOptions{Timeout: provider.MkdirTimeout})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("chmod %s: %s", p, res.Stderr)
	}
	return err
}

// step runs one step; err is a failure, a skip is not.
func (r *bootRun) step(ctx context.Context, s provider.Step) (status, reason string, err error) {
	for _, dep := range s.IfAllOK {
		if !r.ok[dep] {
			return "skipped", "step " + dep + " did not succeed", nil
		}
	}
	if s.Requires != "" && s.Kind != provider.StepService {
		ok, err := r.installed(ctx, s.Requires)
		if err != nil {
			return "", "", err
		}
		if !ok {
			return "skipped", s.Requires + " is not installed", nil
		}
	}
	switch s.Kind {
	case provider.StepMkdir:
		if err := r.e.MakeDir(ctx, s.Path); err != nil {
			return "", "", err
		}
		return "ok", "", r.chmod(ctx, s.Path, s.Mode, 0o755)
	case provider.StepWrite:
		if err := r.e.WriteFile(ctx, s.Path, []byte(s.Content)); err != nil {
			return "", "", err
		}
		return "ok", "", r.chmod(ctx, s.Path, s.Mode, 0o644)
	case provider.StepTouch:
		cmd := "mkdir -p " + provider.ShellEscape(path.Dir(s.Path)) + " && touch " + provider.ShellEscape(s.Path)
		return "ok", "", r.run(ctx, provider.Step{Command: cmd, TimeoutMs: provider.MkdirTimeout.Milliseconds()})
	case provider.StepRemove:
		for _, p := range s.Paths {
			if err := r.e.Remove(ctx, p); err != nil && !IsNotFound(err) {
				return "", "", err
			}
		}
		return "ok", "", nil
	case provider.StepRun:
		err := r.run(ctx, s)
		if err != nil && s.Fallback != nil {
			if ferr := r.run(ctx, *s.Fallback); ferr != nil {
				return "", "", fmt.Errorf("%w; fallback: %w", err, ferr)
			}
			return "ok", "fallback", nil
		}
		return "ok", "", err
	case provider.StepStart:
		// The process belongs to the sandbox, not to this call: envd keeps it running
		// after the stream is dropped.
		proc, err := r.e.Start(ctx, StartOptions{Cmd: "/bin/bash", Args: []string{"-c", s.Command}, Envs: r.env(s.Env)})
		if err != nil {
			return "", "", err
		}
		proc.Detach()
		if s.Name == provider.StepNameSandboxMCP {
			if err := r.p.sidecarHealthy(ctx, r.mcpURL); err != nil {
				logTail, _ := r.e.ReadFile(ctx, provider.DefaultPaths().SandboxMCPLog())
				return "", "", fmt.Errorf("%w; log: %s", err, provider.RedactSecrets(tail(string(logTail), 2048)))
			}
			r.sidecarUp = true
		}
		return "ok", "", nil
	case provider.StepGitBundle:
		// Tokenless sandboxes: the host fetches with the token, envd gets a bundle.
		sctx, cancel := context.WithTimeout(ctx, s.Timeout())
		defer cancel()
		_, err := provider.ExecGitBundle(sctx, envdExecutor{r}, r.p.o.GitMirrors, s)
		return "ok", "", err
	case provider.StepService:
		if !r.sidecarUp {
			return "skipped", "sandbox-mcp is not running", nil
		}
		cl, err := sidecar.New(sidecar.Options{BaseURL: r.mcpURL, Token: r.token, HTTPClient: r.p.hc})
		if err != nil {
			return "", "", err
		}
		sctx, cancel := context.WithTimeout(ctx, s.Timeout())
		defer cancel()
		_, err = cl.StartService(sctx, apitype.StartServiceRequest{Name: s.Service.Name, Command: s.Service.Command, Cwd: s.Service.Cwd})
		return "ok", "", err
	}
	return "", "", fmt.Errorf("unknown step kind %q", s.Kind)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// envdExecutor is a provider.Executor over the sandbox's envd, for the helpers
// of package provider (git-bundle steps).
type envdExecutor struct{ r *bootRun }

func (x envdExecutor) Run(ctx context.Context, command string, timeout time.Duration) (provider.ExecResult, error) {
	res, err := x.r.e.Run(ctx, command, RunOptions{Envs: x.r.env(nil), Timeout: timeout, MaxOutput: 64 << 10})
	if err == nil && res.TimedOut {
		err = fmt.Errorf("timed out after %s", timeout)
	}
	return provider.ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}, err
}

func (x envdExecutor) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return x.r.e.ReadFile(ctx, p)
}

func (x envdExecutor) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := x.r.e.WriteFile(ctx, p, data); err != nil {
		return err
	}
	return x.r.chmod(ctx, p, provider.Mode(mode), 0o644)
}

// sidecarHealthy polls sandbox-mcp's health at url until it answers or timeout.
func (p *Provider) sidecarHealthy(ctx context.Context, base string) error {
	cl, err := sidecar.New(sidecar.Options{BaseURL: base, HTTPClient: p.hc, Retries: -1})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, p.o.SidecarTimeout)
	defer cancel()
	for {
		hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cl.Health(hctx)
		hcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for sandbox-mcp at %s: %w (last: %v)", base, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// metadata reads the session metadata of a restored sandbox; nil when absent.
func readMetadata(ctx context.Context, e *Envd) *provider.SessionMetadata {
	return provider.ParseSessionMetadata(e.ReadFile(ctx, provider.DefaultPaths().MetadataFile()))
}
