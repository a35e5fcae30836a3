package e2b

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

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
	t := &target{p: p, e: e, mcpURL: mcpURL, token: opts.EnvVars[provider.EnvSandboxMCPAuthToken]}
	r := provider.NewRunner(plan, t, provider.RunOptions{SidecarTimeout: p.o.SidecarTimeout, GitMirrors: p.o.GitMirrors,
		OnStep: func(s provider.Step, rep provider.StepReport) {
			p.log.Info("boot step", "sandbox_id", sb.SandboxID, "phase", rep.Phase, "step", s.Name, "status", rep.Status, "reason", rep.Reason)
		}})
	if err := r.RunPhase(ctx, provider.PhaseBlocking); err != nil {
		return provider.CreateResult{}, err
	}
	if err := r.RunPhase(ctx, provider.PhaseBackground); err != nil {
		return provider.CreateResult{}, err
	}
	if err := r.SidecarError(); err != nil {
		return provider.CreateResult{}, fmt.Errorf("%w (is it installed in the template?)", err)
	}
	res := provider.CreateResult{SandboxID: sb.SandboxID, SandboxMCPURL: mcpURL}
	if r.Succeeded(provider.StepNameOpenCode) {
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

// target is provider.Target over a sandbox's envd.
type target struct {
	p      *Provider
	e      *Envd
	mcpURL string
	token  string
}

// Exec runs command with bash in the user's home.
func (t *target) Exec(ctx context.Context, command string, env map[string]string, timeout time.Duration) (provider.ExecResult, error) {
	res, err := t.e.Run(ctx, command, RunOptions{Envs: env, Timeout: timeout, MaxOutput: 64 << 10})
	out := provider.ExecResult{Stdout: res.Stdout, Stderr: res.Stderr, ExitCode: res.ExitCode}
	if err == nil && res.TimedOut {
		err = provider.ErrExecTimeout
	}
	return out, err
}

// StartDetached starts command with bash. The process belongs to the sandbox, not to
// this call: envd keeps it running after the stream is dropped.
func (t *target) StartDetached(ctx context.Context, command string, env map[string]string) error {
	proc, err := t.e.Start(ctx, StartOptions{Cmd: "/bin/bash", Args: []string{"-c", command}, Envs: env})
	if err != nil {
		return err
	}
	proc.Detach()
	return nil
}

// WriteFile writes through envd (which creates the parents and writes 0644), then
// sets any other mode.
func (t *target) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := t.e.WriteFile(ctx, p, data); err != nil {
		return err
	}
	return t.chmod(ctx, p, mode, 0o644)
}

func (t *target) ReadFile(ctx context.Context, p string) ([]byte, error) { return t.e.ReadFile(ctx, p) }

// MkdirAll makes the directory through envd (0755), then sets any other mode.
func (t *target) MkdirAll(ctx context.Context, p string, mode fs.FileMode) error {
	if err := t.e.MakeDir(ctx, p); err != nil {
		return err
	}
	return t.chmod(ctx, p, mode, 0o755)
}

func (t *target) Sidecar() (*sidecar.Client, error) {
	return sidecar.New(sidecar.Options{BaseURL: t.mcpURL, Token: t.token, HTTPClient: t.p.hc, Retries: -1})
}

// chmod sets mode on p unless it is def, what envd gave it.
func (t *target) chmod(ctx context.Context, p string, mode, def fs.FileMode) error {
	if mode.Perm() == def {
		return nil
	}
	res, err := t.e.Run(ctx, "chmod "+strconv.FormatUint(uint64(mode.Perm()), 8)+" "+provider.ShellEscape(p), RunOptions{Timeout: provider.MkdirTimeout})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("chmod %s: %s", p, res.Stderr)
	}
	return err
}

// metadata reads the session metadata of a restored sandbox; nil when absent.
func readMetadata(ctx context.Context, e *Envd) *provider.SessionMetadata {
	return provider.ParseSessionMetadata(e.ReadFile(ctx, provider.DefaultPaths().MetadataFile()))
}

// Target is the provider.Target of a running sandbox, with token for its sidecar:
// what the boot runs its plan in, to run another plan the same way.
func (p *Provider) Target(ctx context.Context, sandboxID, token string) (provider.Target, error) {
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(provider.OpExecCommand, err)
	}
	mcpURL, err := p.tunnel(ctx, sandboxID, provider.PortSandboxMCP)
	if err != nil {
		return nil, p.fail(provider.OpExecCommand, err)
	}
	return &target{p: p, e: e, mcpURL: mcpURL, token: token}, nil
}
