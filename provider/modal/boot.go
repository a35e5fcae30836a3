package modal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// CreateSandbox creates a sandbox named after the session and boots it: the
// blocking steps of the boot plan before returning, the background steps after.
func (p *Provider) CreateSandbox(ctx context.Context, opts provider.CreateOptions) (provider.CreateResult, error) {
	res, err := p.create(ctx, opts)
	if err != nil {
		return provider.CreateResult{}, p.fail(provider.OpCreateSandbox, err)
	}
	return res, nil
}

func (p *Provider) create(ctx context.Context, opts provider.CreateOptions) (provider.CreateResult, error) {
	if opts.SessionID == "" {
		return provider.CreateResult{}, fmt.Errorf("sessionId is required")
	}
	c, app, err := p.connect(ctx, provider.OpCreateSandbox)
	if err != nil {
		return provider.CreateResult{}, err
	}
	var img *modalsdk.Image
	switch src := PickImageSource(opts, p.o.Getenv); src.Kind {
	case "snapshot", "base-snapshot":
		img, err = c.Images.FromID(ctx, src.ID, nil)
		if err != nil {
			return provider.CreateResult{}, fmt.Errorf("image %s: %w", src.ID, err)
		}
	default:
		if img, err = p.image.Image(c); err != nil {
			return provider.CreateResult{}, err
		}
	}
	settings := provider.LoadHostSettings(p.o.Getenv)
	env := provider.PrepareSandboxEnv(opts.SessionID, opts.EnvVars, settings.LLMProxyBaseURL)
	createdAt := p.o.Now()
	timeout := provider.SandboxTimeout(p.o.Getenv)
	sb, err := c.Sandboxes.Create(ctx, app, img, &modalsdk.SandboxCreateParams{
		Name: opts.SessionID, CPU: CPU, MemoryMiB: MemoryMiB, Timeout: timeout, Env: env.Env,
		// The sidecar's own tunnel is how the boot waits for its health and starts the
		// session's services, as on the other providers.
		EncryptedPorts:   []int{provider.PortOpenCode, provider.PortPreview, provider.PortSandboxMCP},
		UnencryptedPorts: []int{provider.PortSSH},
	})
	if err != nil {
		return provider.CreateResult{}, err
	}
	res, err := p.boot(ctx, sb, opts, settings, createdAt)
	if err != nil {
		// A half-booted sandbox is of no use to anyone: end it.
		if _, terr := sb.Terminate(context.WithoutCancel(ctx), nil); terr != nil {
			p.log.Warn("terminate after failed boot", "sandbox", sb.SandboxID, "err", provider.RedactSecrets(terr.Error()))
		}
		return provider.CreateResult{}, err
	}
	res.ExpiresAt = createdAt.Add(timeout).UnixMilli()
	return res, nil
}

func (p *Provider) boot(ctx context.Context, sb *modalsdk.Sandbox, opts provider.CreateOptions, settings provider.HostSettings, now time.Time) (provider.CreateResult, error) {
	t, err := tunnels(ctx, sb)
	if err != nil {
		return provider.CreateResult{}, fmt.Errorf("tunnels: %w", err)
	}
	mcpURL, err := sidecarURL(ctx, sb)
	if err != nil {
		return provider.CreateResult{}, fmt.Errorf("tunnels: %w", err)
	}
	var meta *provider.SessionMetadata
	if opts.SnapshotID != "" {
		meta = readMetadata(ctx, sb)
	}
	plan, err := provider.BuildPlan(opts, provider.PlanConfig{Kind: provider.KindModal, Settings: settings, Now: now,
		Metadata: meta, SandboxMCPCommand: p.o.SandboxMCPCommand})
	if err != nil {
		return provider.CreateResult{}, err
	}
	for _, w := range plan.Warnings {
		p.log.Warn("boot plan", "session", opts.SessionID, "warning", w)
	}
	tg := &target{p: p, sb: sb, mcpURL: mcpURL, token: opts.EnvVars[provider.EnvSandboxMCPAuthToken]}
	r := provider.NewRunner(plan, tg, provider.RunOptions{GitMirrors: p.o.GitMirrors, Ended: tg.ended,
		OnStep: func(s provider.Step, rep provider.StepReport) {
			p.log.Debug("boot step", "sandbox", sb.SandboxID, "phase", rep.Phase, "step", s.Name, "status", rep.Status, "reason", rep.Reason)
		}})
	if err := r.RunPhase(ctx, provider.PhaseBlocking); err != nil {
		return provider.CreateResult{}, fmt.Errorf("boot step %w", err)
	}
	openCode := r.Succeeded(provider.StepNameOpenCode) // read before the background phase runs on
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		err := r.RunPhase(bctx, provider.PhaseBackground)
		if err == nil {
			err = r.SidecarError()
		}
		if err != nil {
			p.log.Warn("background boot failed", "sandbox", sb.SandboxID, "err", provider.RedactSecrets(err.Error()))
		}
	}()
	if t.OpenCodeURL != "" && openCode {
		if _, err := provider.WaitForOpenCodeReady(ctx, t.OpenCodeURL, provider.ReadyOptions{Client: p.o.HTTPClient, MaxWait: p.o.ReadyWait}); err != nil {
			p.log.Warn("OpenCode is not ready", "sandbox", sb.SandboxID, "err", provider.RedactSecrets(err.Error()))
		}
	}
	return provider.CreateResult{SandboxID: sb.SandboxID, SandboxMCPURL: mcpURL, TunnelURL: t.OpenCodeURL, PreviewURL: t.PreviewURL,
		SSHHost: t.SSHHost, SSHPort: t.SSHPort}, nil
}

// sidecarURL is the URL of the sandbox's sandbox-mcp tunnel.
func sidecarURL(ctx context.Context, sb *modalsdk.Sandbox) (string, error) {
	ts, err := sb.Tunnels(ctx, TunnelTimeout, nil)
	if err != nil {
		return "", err
	}
	if t := ts[provider.PortSandboxMCP]; t != nil {
		return t.URL(), nil
	}
	return "", fmt.Errorf("no tunnel for sandbox-mcp's port %d", provider.PortSandboxMCP)
}

// Target is the provider.Target of a running sandbox, with token for its sidecar:
// what the boot runs its plan in, to run another plan the same way.
func (p *Provider) Target(ctx context.Context, sandboxID, token string) (provider.Target, error) {
	c, _, err := p.connect(ctx, provider.OpExecCommand)
	if err != nil {
		return nil, err
	}
	sb, err := c.Sandboxes.FromID(ctx, sandboxID, nil)
	if err != nil {
		return nil, p.fail(provider.OpExecCommand, err)
	}
	mcpURL, err := sidecarURL(ctx, sb)
	if err != nil {
		return nil, p.fail(provider.OpExecCommand, err)
	}
	return &target{p: p, sb: sb, mcpURL: mcpURL, token: token}, nil
}

// target is provider.Target over the SDK: files with the filesystem calls, commands
// with Exec (argv, never an interpolated script), the sidecar through its tunnel.
type target struct {
	p      *Provider
	sb     *modalsdk.Sandbox
	mcpURL string
	token  string
}

// Exec runs command with bash in the user's home. The timeout shows either as the
// SDK's ExecTimeoutError or, when the sandbox's kill is seen first, as exit code 124
// once the timeout has passed: both are ErrExecTimeout.
func (t *target) Exec(ctx context.Context, command string, env map[string]string, timeout time.Duration) (provider.ExecResult, error) {
	start := time.Now()
	res, err := run(ctx, t.sb, []string{"bash", "-c", command}, &modalsdk.SandboxExecParams{Workdir: provider.HomeDir,
		Env: env, Timeout: wholeSeconds(timeout)})
	var te modalsdk.ExecTimeoutError
	switch {
	case errors.As(err, &te):
		return res, fmt.Errorf("%w: %v", provider.ErrExecTimeout, err)
	case err == nil && res.ExitCode == 124 && timeout > 0 && time.Since(start) >= timeout:
		return res, provider.ErrExecTimeout
	}
	return res, err
}

// StartDetached starts command as an exec nobody waits for: on Modal it lives as
// long as the sandbox.
func (t *target) StartDetached(ctx context.Context, command string, env map[string]string) error {
	_, err := t.sb.Exec(ctx, []string{"bash", "-c", command}, &modalsdk.SandboxExecParams{Workdir: provider.HomeDir,
		Env: env, Stdout: modalsdk.Ignore, Stderr: modalsdk.Ignore})
	return err
}

// WriteFile writes through the SDK (0644), then sets any other mode.
func (t *target) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := t.sb.Filesystem.WriteBytes(ctx, data, p, nil); err != nil {
		return err
	}
	return t.chmod(ctx, p, mode, 0o644)
}

func (t *target) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return t.sb.Filesystem.ReadBytes(ctx, p, nil)
}

// MkdirAll makes the directory and its parents through the SDK, then sets its mode.
func (t *target) MkdirAll(ctx context.Context, p string, mode fs.FileMode) error {
	if err := t.sb.Filesystem.MakeDirectory(ctx, p, nil); err != nil {
		return err
	}
	return t.chmod(ctx, p, mode, 0)
}

func (t *target) Sidecar() (*sidecar.Client, error) {
	return sidecar.New(sidecar.Options{BaseURL: t.mcpURL, Token: t.token, HTTPClient: t.p.o.HTTPClient, Retries: -1})
}

// ended says whether the sandbox has finished (terminated during its boot).
func (t *target) ended(ctx context.Context) error {
	if code, err := t.sb.Poll(ctx, nil); err == nil && code != nil {
		return fmt.Errorf("sandbox %s ended with exit code %d", t.sb.SandboxID, *code)
	}
	return nil
}

// chmod sets mode on p unless it is def, what the SDK gave it (0: unknown, always set).
func (t *target) chmod(ctx context.Context, p string, mode, def fs.FileMode) error {
	if def != 0 && mode.Perm() == def {
		return nil
	}
	r, err := run(ctx, t.sb, []string{"chmod", strconv.FormatUint(uint64(mode.Perm()), 8), p}, nil)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("chmod %s: exit code %d: %s", p, r.ExitCode, provider.CapOutput(r.Stderr, 512))
	}
	return err
}

// wholeSeconds rounds a timeout up to whole seconds (the SDK takes no fractions).
func wholeSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}
