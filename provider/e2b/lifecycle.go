package e2b

import (
	"context"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// findRunning is the side-effect-free liveness check of ensure: a sandbox that is
// running now (never a paused one, which connect would resume).
func (p *Provider) findRunning(ctx context.Context, id string) bool {
	if id == "" {
		return false
	}
	d, err := p.client.Get(ctx, id)
	if err != nil {
		return false
	}
	return d.State == e2bwire.StateRunning && (d.EndAt.IsZero() || d.EndAt.After(p.o.Now()))
}

// EnsureSandbox recovers opts.CurrentSandboxID when it is running, else creates.
func (p *Provider) EnsureSandbox(ctx context.Context, opts provider.CreateOptions) (provider.EnsureResult, error) {
	if err := p.ready(provider.OpCreateSandbox); err != nil {
		return provider.EnsureResult{}, err
	}
	if p.findRunning(ctx, opts.CurrentSandboxID) {
		res, err := p.resolve(ctx, opts.CurrentSandboxID)
		if err != nil {
			return provider.EnsureResult{}, p.fail(provider.OpResolveTunnels, err)
		}
		p.log.Info("sandbox recovered", "sandbox_id", opts.CurrentSandboxID)
		return provider.EnsureResult{CreateResult: res, Recovered: true}, nil
	}
	res, err := p.CreateSandbox(ctx, opts)
	return provider.EnsureResult{CreateResult: res}, err
}

// CreateSandbox creates and boots a sandbox: from opts.SnapshotID when set (resuming
// opts.CurrentSandboxID through connect, else creating from the snapshot as a
// template), falling back to a fresh sandbox from the template when that fails. The
// fallback is logged and reported in the result's RestoreFallback.
func (p *Provider) CreateSandbox(ctx context.Context, opts provider.CreateOptions) (provider.CreateResult, error) {
	const op = provider.OpCreateSandbox
	if err := p.ready(op); err != nil {
		return provider.CreateResult{}, err
	}
	createdAt := p.o.Now()
	timeout := provider.SandboxTimeout(p.o.Getenv)
	senv := provider.PrepareSandboxEnv(opts.SessionID, opts.EnvVars, provider.LLMProxyBaseURL(p.o.Getenv))
	var sb e2bwire.Sandbox
	var fallback string
	if opts.SnapshotID != "" {
		var err error
		if opts.CurrentSandboxID != "" {
			sb, err = p.client.Connect(ctx, opts.CurrentSandboxID, timeout)
		} else {
			sb, err = p.client.Create(ctx, e2bwire.NewSandbox{TemplateID: opts.SnapshotID, Timeout: seconds(timeout), Secure: true,
				Metadata: map[string]string{"sessionId": opts.SessionID}, EnvVars: senv.Env})
		}
		if err != nil {
			if ctx.Err() != nil {
				return provider.CreateResult{}, p.fail(op, err)
			}
			fallback = provider.RedactSecrets("restore from snapshot " + opts.SnapshotID + " failed: " + err.Error())
			p.log.Warn("restore failed; creating a fresh sandbox", "session_id", opts.SessionID, "snapshot_id", opts.SnapshotID, "err", fallback)
			opts.SnapshotID = ""
		}
	}
	if opts.SnapshotID == "" {
		if p.o.Template == "" {
			return provider.CreateResult{}, configError(op, "E2B_TEMPLATE is required to create a sandbox")
		}
		var err error
		sb, err = p.client.Create(ctx, e2bwire.NewSandbox{TemplateID: p.o.Template, Timeout: seconds(timeout), Secure: true,
			Metadata: map[string]string{"sessionId": opts.SessionID}, EnvVars: senv.Env})
		if err != nil {
			return provider.CreateResult{}, p.fail(op, err)
		}
	}
	res, err := p.boot(ctx, sb, opts)
	if err != nil {
		// A sandbox whose boot failed is not handed out; a fresh one is killed so it
		// does not run until its timeout.
		if opts.SnapshotID == "" {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_ = p.client.Kill(kctx, sb.SandboxID)
			cancel()
		}
		return provider.CreateResult{}, p.fail(op, err)
	}
	res.ExpiresAt = createdAt.Add(timeout).UnixMilli()
	res.RestoreFallback = fallback
	return res, nil
}

// Snapshot makes a persistent E2B snapshot; its id restores as a template.
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (provider.SnapshotResult, error) {
	if err := p.ready(provider.OpSnapshot); err != nil {
		return provider.SnapshotResult{}, err
	}
	s, err := p.client.CreateSnapshot(ctx, sandboxID, "")
	if err != nil {
		return provider.SnapshotResult{}, p.fail(provider.OpSnapshot, err)
	}
	return provider.SnapshotResult{SnapshotID: s.SnapshotID}, nil
}

// Pause pauses the sandbox; the snapshot id is the sandbox id, which connect resumes.
// An already paused sandbox is success.
func (p *Provider) Pause(ctx context.Context, sessionID, sandboxID string) (provider.SnapshotResult, error) {
	if err := p.ready(provider.OpPause); err != nil {
		return provider.SnapshotResult{}, err
	}
	if sandboxID == "" {
		return provider.SnapshotResult{}, provider.NewProviderError(provider.KindE2B, provider.OpPause, "sandboxId is required for pause", false, nil)
	}
	if err := p.client.Pause(ctx, sandboxID); err != nil && !IsConflict(err) {
		return provider.SnapshotResult{}, p.fail(provider.OpPause, err)
	}
	return provider.SnapshotResult{SnapshotID: sandboxID}, nil
}

// Terminate kills the sandbox; a gone sandbox is success.
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	if sandboxID == "" {
		return provider.MissingSandboxIDError(provider.KindE2B)
	}
	if err := p.ready(provider.OpTerminate); err != nil {
		return err
	}
	err := p.client.Kill(ctx, sandboxID)
	if err == nil || IsNotFound(err) || provider.IsNotFoundMessage(err.Error()) {
		return nil
	}
	return p.fail(provider.OpTerminate, err)
}
