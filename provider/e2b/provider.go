package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// EnvLocalTunnels, when "1" or "true", makes the provider ask the local server
// (e2bserver) for the URL of a sandbox port instead of building <port>-<id>.<domain>.
const EnvLocalTunnels = "E2B_LOCAL_TUNNELS"

// Options configure a Provider.
type Options struct {
	// Client is the control-plane configuration; an empty APIKey leaves the provider
	// unusable but constructible (Health is false, calls fail with a clear error).
	Client ClientOptions
	// Template is the template of fresh sandboxes (E2B_TEMPLATE).
	Template string
	// LocalTunnels resolves ports through the local server's mapping.
	LocalTunnels bool
	// Getenv reads the host settings (SANDBOX_TIMEOUT_SECONDS, LLM proxy, git pull);
	// nil means an empty environment.
	Getenv func(string) string
	// SandboxMCPCommand is how sandbox-mcp is invoked inside the sandbox; empty means
	// "sandbox-mcp" from PATH.
	SandboxMCPCommand string
	// SidecarTimeout bounds the wait for sandbox-mcp's health; zero means 30s.
	SidecarTimeout time.Duration
	// Logger receives boot steps and restore fallbacks; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// GitMirrors makes the bundles of the plan's git-bundle steps (tokenless
	// sandboxes, docs/git-bundle.md); nil means provider.DefaultGitMirrors.
	GitMirrors provider.GitBundler
}

// OptionsFromEnv reads E2B_API_KEY, E2B_DOMAIN, E2B_API_URL, E2B_SANDBOX_URL,
// E2B_TEMPLATE and E2B_LOCAL_TUNNELS.
func OptionsFromEnv(getenv func(string) string) Options {
	lt := strings.ToLower(strings.TrimSpace(getenv(EnvLocalTunnels)))
	return Options{Client: ClientOptionsFromEnv(getenv), Template: strings.TrimSpace(getenv(EnvTemplate)),
		LocalTunnels: lt == "1" || lt == "true", Getenv: getenv}
}

// Provider is the E2B SandboxProvider. It keeps no state between calls.
type Provider struct {
	o      Options
	client *Client // nil without an API key
	cerr   error
	log    *slog.Logger
	hc     *http.Client
}

var (
	_ provider.SandboxProvider = (*Provider)(nil)
	_ provider.SandboxChecker  = (*Provider)(nil)
	_ provider.CommandExecer   = (*Provider)(nil)
	_ provider.FileReader      = (*Provider)(nil)
	_ provider.ServiceTester   = (*Provider)(nil)
)

// New returns a Provider. A missing API key is not an error here (Health reports it);
// a malformed URL is.
func New(o Options) (*Provider, error) {
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SidecarTimeout <= 0 {
		o.SidecarTimeout = 30 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Provider{o: o, log: log.With("component", "e2b")}
	p.hc = o.Client.HTTPClient
	if p.hc == nil {
		p.hc = &http.Client{}
		o.Client.HTTPClient = p.hc
	}
	if o.Client.APIKey == "" {
		p.cerr = errors.New("E2B_API_KEY is required to use the E2B provider")
		return p, nil
	}
	c, err := NewClient(o.Client)
	if err != nil {
		return nil, err
	}
	p.client = c
	return p, nil
}

// Kind is provider.KindE2B.
func (p *Provider) Kind() provider.Kind { return provider.KindE2B }

// Capabilities: E2B pauses and auto-pauses; it has no memory snapshots of ours.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{SupportsPause: true, SupportsAutoPause: true}
}

func (p *Provider) fail(op provider.Operation, err error) *provider.ProviderError {
	var ae *APIError
	if errors.As(err, &ae) {
		// E2B's validation errors carry the request back; the message is redacted by
		// NewProviderError and the body is never exposed raw.
		pe := provider.NewProviderError(provider.KindE2B, op, ae.Error(), provider.IsRetryableStatus(ae.Status) || ae.Status >= 500, err)
		pe.StatusCode = ae.Status
		return pe
	}
	return provider.FromError(err, provider.KindE2B, op)
}

func (p *Provider) ready(op provider.Operation) error {
	if p.client == nil {
		return configError(op, p.cerr.Error())
	}
	return nil
}

// configError is a non-retryable error about the provider's own settings. Its message
// is a constant naming environment variables, which the secret redaction would mangle
// (it takes E2B_-prefixed words for keys), so it is not passed through it.
func configError(op provider.Operation, msg string) *provider.ProviderError {
	return &provider.ProviderError{Provider: provider.KindE2B, Operation: op, Raw: msg,
		Message: "[" + string(provider.KindE2B) + ":" + string(op) + "] " + msg}
}

// Health lists one sandbox; it is false without an API key or on any error.
func (p *Provider) Health(ctx context.Context) bool {
	if p.client == nil {
		return false
	}
	_, err := p.client.List(ctx, ListOptions{Limit: 1, States: []string{StateRunning}})
	return err == nil
}

// CheckSandboxes lists the running sandboxes (every page) and returns the ids among
// them, in input order. It never connects, so it never resumes a paused sandbox. A
// failed list is logged and answers none, as the platform expects.
func (p *Provider) CheckSandboxes(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return []string{}, nil
	}
	if p.client == nil {
		p.log.Warn("check sandboxes", "err", p.cerr)
		return []string{}, nil
	}
	all, err := p.client.List(ctx, ListOptions{States: []string{StateRunning}})
	if err != nil {
		p.log.Warn("check sandboxes: list failed", "err", provider.RedactSecrets(err.Error()))
		return []string{}, nil
	}
	running := make(map[string]bool, len(all))
	for _, s := range all {
		running[s.SandboxID] = true
	}
	out := []string{}
	for _, id := range ids {
		if running[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

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
	return d.State == StateRunning && (d.EndAt.IsZero() || d.EndAt.After(p.o.Now()))
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

// resolve builds the result of a running sandbox from its tunnels, without booting.
func (p *Provider) resolve(ctx context.Context, id string) (provider.CreateResult, error) {
	res := provider.CreateResult{SandboxID: id}
	var err error
	if res.TunnelURL, err = p.tunnel(ctx, id, provider.PortOpenCode); err != nil {
		return res, err
	}
	if res.PreviewURL, err = p.tunnel(ctx, id, provider.PortPreview); err != nil {
		return res, err
	}
	if res.SandboxMCPURL, err = p.tunnel(ctx, id, provider.PortSandboxMCP); err != nil {
		return res, err
	}
	return res, nil
}

// tunnel is the URL of a port of a sandbox.
func (p *Provider) tunnel(ctx context.Context, id string, port int) (string, error) {
	if p.o.LocalTunnels {
		return p.client.PortURL(ctx, id, port)
	}
	return "https://" + Host(id, port, p.client.Domain()), nil
}

// Sidecar returns the URL of a sandbox's sandbox-mcp API and its token (read from the
// sandbox's environment). It connects, so a paused sandbox is resumed.
func (p *Provider) Sidecar(ctx context.Context, sandboxID string) (url, token string, err error) {
	if err := p.ready(provider.OpResolveTunnels); err != nil {
		return "", "", err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return "", "", p.fail(provider.OpResolveTunnels, err)
	}
	r, err := e.Run(ctx, `printf %s "$`+provider.EnvSandboxMCPAuthToken+`"`, RunOptions{Timeout: 30 * time.Second})
	if err != nil {
		return "", "", p.fail(provider.OpResolveTunnels, err)
	}
	url, err = p.tunnel(ctx, sandboxID, provider.PortSandboxMCP)
	if err != nil {
		return "", "", p.fail(provider.OpResolveTunnels, err)
	}
	return url, r.Stdout, nil
}

// PortURL asks the local server (e2bserver) for a URL that reaches port inside the
// sandbox. It is not part of E2B's API.
func (c *Client) PortURL(ctx context.Context, id string, port int) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	_, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/sandboxes/%s/ports/%d", url.PathEscape(id), port), nil, nil, &out)
	if err == nil && out.URL == "" {
		err = errors.New("port mapping answer has no url")
	}
	return out.URL, err
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
	var sb Sandbox
	var fallback string
	if opts.SnapshotID != "" {
		var err error
		if opts.CurrentSandboxID != "" {
			sb, err = p.client.Connect(ctx, opts.CurrentSandboxID, timeout)
		} else {
			sb, err = p.client.Create(ctx, NewSandbox{TemplateID: opts.SnapshotID, Timeout: seconds(timeout), Secure: true,
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
		sb, err = p.client.Create(ctx, NewSandbox{TemplateID: p.o.Template, Timeout: seconds(timeout), Secure: true,
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

// envd connects to a sandbox (resuming it when paused) and returns its envd client.
func (p *Provider) envd(ctx context.Context, sandboxID string) (*Envd, error) {
	s, err := p.client.Connect(ctx, sandboxID, provider.SandboxTimeout(p.o.Getenv))
	if err != nil {
		return nil, err
	}
	return p.client.Envd(s), nil
}

// WriteEnvFile merges envVars into the env override file. It connects, so a paused
// sandbox is resumed.
func (p *Provider) WriteEnvFile(ctx context.Context, sandboxID string, envVars map[string]string) error {
	const op = provider.OpWriteEnvFile
	if err := p.ready(op); err != nil {
		return err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return p.fail(op, err)
	}
	file := provider.DefaultPaths().EnvOverrideFile()
	old, err := e.ReadFile(ctx, file)
	if err != nil && !IsNotFound(err) {
		return p.fail(op, err)
	}
	if err := e.WriteFile(ctx, file, provider.MergeEnvFile(old, envVars)); err != nil {
		return p.fail(op, err)
	}
	return nil
}

// ExecCommand runs argv without shell interpolation (each word escaped), under
// timeout(1), in cwd, with env.
func (p *Provider) ExecCommand(ctx context.Context, sandboxID string, argv []string, o provider.ExecOptions) (provider.ExecResult, error) {
	const op = provider.OpExecCommand
	if err := p.ready(op); err != nil {
		return provider.ExecResult{}, err
	}
	if len(argv) == 0 {
		return provider.ExecResult{}, provider.NewProviderError(provider.KindE2B, op, "argv is required", false, nil)
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return provider.ExecResult{}, p.fail(op, err)
	}
	env := map[string]string{}
	for _, kv := range o.Env {
		env[kv.Key] = kv.Value
	}
	r, err := e.Run(ctx, provider.BuildE2BExecCommand(argv, o.Cwd, timeout), RunOptions{Envs: env, Timeout: timeout + 5*time.Second})
	if err != nil {
		return provider.ExecResult{}, p.fail(op, err)
	}
	return provider.ExecResult{Stdout: provider.CapOutput(r.Stdout, 0), Stderr: provider.CapOutput(r.Stderr, 0), ExitCode: r.ExitCode}, nil
}

// ReadFiles returns every regular file under folder (recursively, by listing
// directories); a missing folder is none, unreadable files are skipped.
func (p *Provider) ReadFiles(ctx context.Context, sandboxID, folder string) ([]provider.FileContent, error) {
	const op = provider.OpReadFiles
	if err := p.ready(op); err != nil {
		return nil, err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(op, err)
	}
	folder = strings.TrimSuffix(folder, "/")
	if _, err := e.Stat(ctx, folder); err != nil {
		if IsNotFound(err) {
			return []provider.FileContent{}, nil
		}
		return nil, p.fail(op, err)
	}
	out := []provider.FileContent{}
	stack := []string{folder}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		entries, err := e.ListDir(ctx, dir)
		if err != nil {
			if IsNotFound(err) {
				continue
			}
			return nil, p.fail(op, err)
		}
		for _, en := range entries {
			switch en.Type {
			case FileTypeDirectory:
				stack = append(stack, en.Path)
			case FileTypeFile:
				data, err := e.ReadFile(ctx, en.Path)
				if err != nil {
					if ctx.Err() != nil {
						return nil, p.fail(op, ctx.Err())
					}
					continue
				}
				out = append(out, provider.FileContent{Path: strings.TrimPrefix(en.Path, folder+"/"), Data: data})
			}
		}
	}
	return out, nil
}

// TestServiceCommands runs each command to completion (or its timeout) with its
// output in a log file, and reports the capped output and exit code.
func (p *Provider) TestServiceCommands(ctx context.Context, sandboxID string, cmds []provider.ConfigurationServiceCommand, o provider.ServiceTestOptions) ([]provider.ServiceTestResult, error) {
	const op = provider.OpTestServiceCommands
	if err := p.ready(op); err != nil {
		return nil, err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(op, err)
	}
	paths := provider.DefaultPaths()
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	out := make([]provider.ServiceTestResult, 0, len(cmds))
	for i, c := range cmds {
		cwd := provider.ServiceCwd(paths, c.WorkspacePath, c.Cwd)
		logFile := paths.ServiceTestLogFile(o.RunID, i, c.Name)
		res := provider.ServiceTestResult{Name: c.Name, WorkspacePath: c.WorkspacePath, Cwd: cwd, LogFile: logFile}
		r, err := e.Run(ctx, provider.BuildServiceTestCommand(cwd, c.Command, logFile, 0), RunOptions{Timeout: timeout})
		one := 1
		switch {
		case err != nil:
			res.Output, res.ExitCode = provider.RedactSecrets(err.Error()), &one
		default:
			code := r.ExitCode
			res.Output, res.ExitCode = provider.CapOutput(r.Stdout+r.Stderr, 0), &code
		}
		out = append(out, res)
	}
	return out, nil
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
	b, err := e.ReadFile(ctx, provider.DefaultPaths().MetadataFile())
	if err != nil {
		return nil
	}
	var m provider.SessionMetadata
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return &m
}
