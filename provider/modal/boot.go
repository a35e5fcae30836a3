package modal

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider"
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
	switch src := provider.ModalImageSource(opts, p.o.Getenv); src.Kind {
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
		EncryptedPorts:   []int{provider.PortOpenCode, provider.PortPreview},
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
	ex := &executor{p: p, sb: sb, status: map[string]string{}}
	if err := ex.steps(ctx, plan.Blocking); err != nil {
		return provider.CreateResult{}, err
	}
	openCode := ex.ran("start opencode") // read before the background phase writes the map
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
		defer cancel()
		if err := ex.steps(bctx, plan.Background); err != nil {
			p.log.Warn("background boot failed", "sandbox", sb.SandboxID, "err", provider.RedactSecrets(err.Error()))
		}
	}()
	if t.OpenCodeURL != "" && openCode {
		if _, err := provider.WaitForOpenCodeReady(ctx, t.OpenCodeURL, provider.ReadyOptions{Client: p.o.HTTPClient, MaxWait: p.o.ReadyWait}); err != nil {
			p.log.Warn("OpenCode is not ready", "sandbox", sb.SandboxID, "err", provider.RedactSecrets(err.Error()))
		}
	}
	return provider.CreateResult{SandboxID: sb.SandboxID, TunnelURL: t.OpenCodeURL, PreviewURL: t.PreviewURL,
		SSHHost: t.SSHHost, SSHPort: t.SSHPort}, nil
}

// executor runs plan steps in one sandbox through the SDK: files with the
// filesystem calls, commands with Exec (argv, never an interpolated script).
type executor struct {
	p  *Provider
	sb *modalsdk.Sandbox

	status map[string]string // step name -> ok | skipped | failed (guarded by the caller's order)
}

const (
	stepOK      = "ok"
	stepSkipped = "skipped"
	stepFailed  = "failed"
)

func (e *executor) ran(name string) bool { return e.status[name] == stepOK }

func (e *executor) steps(ctx context.Context, steps []provider.Step) error {
	for _, s := range steps {
		st, err := e.step(ctx, s)
		e.status[s.Name] = st
		log := e.p.log.With("sandbox", e.sb.SandboxID, "step", s.Name, "status", st)
		if err != nil {
			log = log.With("err", provider.RedactSecrets(err.Error()))
		}
		log.Debug("boot step")
		if st == stepFailed && s.Fatal {
			return fmt.Errorf("boot step %q: %w", s.Name, err)
		}
	}
	return nil
}

func (e *executor) step(ctx context.Context, s provider.Step) (string, error) {
	for _, dep := range s.IfAllOK {
		if e.status[dep] != stepOK {
			return stepSkipped, nil
		}
	}
	fsys := e.sb.Filesystem
	switch s.Kind {
	case provider.StepMkdir:
		if err := fsys.MakeDirectory(ctx, s.Path, nil); err != nil {
			return stepFailed, err
		}
		return stepOK, e.chmod(ctx, s.Mode, s.Path)
	case provider.StepWrite:
		if err := fsys.WriteText(ctx, s.Content, s.Path, nil); err != nil {
			return stepFailed, err
		}
		if s.Mode != 0 && fs.FileMode(s.Mode) != 0o644 {
			return stepOK, e.chmod(ctx, s.Mode, s.Path)
		}
		return stepOK, nil
	case provider.StepTouch:
		return e.exit(ctx, []string{"touch", s.Path}, s)
	case provider.StepRemove:
		return e.exit(ctx, append([]string{"rm", "-f", "--"}, s.Paths...), s)
	case provider.StepGitBundle:
		// Tokenless sandboxes: the host fetches with the token, the sandbox gets a bundle.
		sctx, cancel := context.WithTimeout(ctx, s.Timeout())
		defer cancel()
		if _, err := provider.ExecGitBundle(sctx, sdkExecutor{e}, e.p.o.GitMirrors, s); err != nil {
			return stepFailed, err
		}
		return stepOK, nil
	}
	if s.Requires != "" {
		r, err := run(ctx, e.sb, []string{"sh", "-c", `command -v "$1" >/dev/null 2>&1 || test -e "$1"`, "--", s.Requires}, nil)
		if err != nil {
			return stepFailed, err
		}
		if r.ExitCode != 0 {
			return stepSkipped, nil
		}
	}
	switch s.Kind {
	case provider.StepRun, provider.StepService:
		st, err := e.exit(ctx, []string{"bash", "-c", s.Command}, s)
		if st == stepFailed && s.Fallback != nil {
			return e.step(ctx, *s.Fallback)
		}
		return st, err
	case provider.StepStart:
		// A long-running process is an exec nobody waits for: on Modal it lives as long
		// as the sandbox (or its timeout).
		_, err := e.sb.Exec(ctx, []string{"bash", "-c", s.Command}, &modalsdk.SandboxExecParams{
			Env: s.Env, Timeout: wholeSeconds(s.Timeout()), Stdout: modalsdk.Ignore, Stderr: modalsdk.Ignore})
		if err != nil {
			return stepFailed, err
		}
		return stepOK, nil
	}
	return stepFailed, fmt.Errorf("unknown step kind %q", s.Kind)
}

// exit runs argv to completion and reports ok on exit code 0.
func (e *executor) exit(ctx context.Context, argv []string, s provider.Step) (string, error) {
	r, err := run(ctx, e.sb, argv, &modalsdk.SandboxExecParams{Env: s.Env, Timeout: wholeSeconds(s.Timeout())})
	if err != nil {
		return stepFailed, err
	}
	if r.ExitCode != 0 {
		return stepFailed, fmt.Errorf("exit code %d: %s", r.ExitCode, provider.CapOutput(r.Stderr+r.Stdout, 2048))
	}
	return stepOK, nil
}

func (e *executor) chmod(ctx context.Context, mode provider.Mode, path string) error {
	if mode == 0 {
		return nil
	}
	_, err := e.exit(ctx, []string{"chmod", strconv.FormatUint(uint64(fs.FileMode(mode).Perm()), 8), path}, provider.Step{})
	return err
}

// wholeSeconds rounds a timeout up to whole seconds (the SDK takes no fractions).
func wholeSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}

// sdkExecutor is a provider.Executor over the SDK's exec and filesystem calls, for
// the helpers of package provider (git-bundle steps).
type sdkExecutor struct{ e *executor }

func (x sdkExecutor) Run(ctx context.Context, command string, timeout time.Duration) (provider.ExecResult, error) {
	return run(ctx, x.e.sb, []string{"bash", "-c", command}, &modalsdk.SandboxExecParams{Timeout: wholeSeconds(timeout)})
}

func (x sdkExecutor) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return x.e.sb.Filesystem.ReadBytes(ctx, p, nil)
}

func (x sdkExecutor) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := x.e.sb.Filesystem.WriteBytes(ctx, data, p, nil); err != nil {
		return err
	}
	if perm := mode.Perm(); perm != 0 && perm != 0o644 {
		return x.e.chmod(ctx, provider.Mode(perm), p)
	}
	return nil
}
