package provider

// The one SandboxProvider: the platform's boot written once over the engine contract
// (engine.Engine). The local engine, Modal and E2B differ only in what their engines
// say they can do (engine.Capabilities and the optional interfaces of package
// engine); everything a caller asks for one sandbox (limits, volumes, image, runtime,
// secrets) travels with the create call in CreateOptions.Spec.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Options configure New. Every field but Kind has a usable zero value.
type Options struct {
	// Kind names the provider in its errors and Kind(); required.
	Kind Kind
	// Getenv reads the host settings (SANDBOX_GIT_PULL_ON_RESTORE, the LLM proxy, …);
	// nil means an empty environment.
	Getenv func(string) string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives step outcomes; nil discards.
	Logger *slog.Logger
	// Progress, when set, receives one line per boot step a person waits for
	// (sandboxctl's stderr).
	Progress io.Writer
	// GitMirrors makes the bundles of the plan's git-bundle steps; nil means
	// DefaultGitMirrors.
	GitMirrors GitBundler
	// SidecarTimeout bounds the wait for sandbox-mcp's health; zero means
	// SidecarWaitTimeout.
	SidecarTimeout time.Duration
	// Timeout is the lifetime of a sandbox whose Spec.Timeout is zero; zero means
	// none (the sandbox lives until Terminate).
	Timeout time.Duration
	// SandboxMCPCommand is how the boot starts sandbox-mcp; empty means
	// "sandbox-mcp" from PATH. An engine that does not isolate (Capabilities.Isolated
	// false) runs the host's binary: its path is required then.
	SandboxMCPCommand string
	// RunOpenCode and RunCaddy start OpenCode and Caddy on an engine that does not
	// isolate, when installed (their configs bind the fixed ports 4096 and 20000,
	// which several such sandboxes cannot share). Isolated sandboxes always start them
	// when installed.
	RunOpenCode bool
	RunCaddy    bool
	// ReadyWait bounds the wait for OpenCode's readiness (a warning only); zero means
	// OpenCodeReadyWait.
	ReadyWait time.Duration
	// HTTPClient reaches the sandboxes' ports; nil means the engine's
	// (engine.PortClienter), else a default client.
	HTTPClient *http.Client
	// LLMKeysInSandbox puts the boot's LLM keys (ANTHROPIC_API_KEY, or the LLM
	// proxy's key) into the sandbox's environment as they are, where the agent and
	// everything it runs can read them. By default (false) they are Spec.Secrets: the
	// sandbox holds placeholders and the engine's egress proxy adds the keys on the
	// way to their API hosts (LLMSecrets). An engine that cannot carry secrets (Modal
	// or E2B without an egress gateway, an engine without isolation) then refuses a
	// boot with a key; set this to accept the key inside the sandbox there.
	LLMKeysInSandbox bool
}

// Provider is the SandboxProvider over an engine.Engine. It keeps no state of its own:
// everything it needs about a sandbox it reads from the engine or the sandbox.
type Provider struct {
	eng  engine.Engine
	caps engine.Capabilities
	o    Options
	log  *slog.Logger
	hc   *http.Client
	// noPorts boots a bastion agent: no tunnel, reached through DialPort
	// (provider_bastion.go).
	noPorts bool
}

var (
	_ SandboxProvider = (*Provider)(nil)
	_ SandboxChecker  = (*Provider)(nil)
	_ CommandExecer   = (*Provider)(nil)
	_ FileReader      = (*Provider)(nil)
	_ ServiceTester   = (*Provider)(nil)
)

// New returns the provider of kind o.Kind over eng. It fails on a bad configuration
// rather than on first use. Closing eng is the caller's business.
func New(eng engine.Engine, o Options) (*Provider, error) {
	if eng == nil {
		return nil, errors.New("new provider: an engine is required")
	}
	if o.Kind == "" {
		return nil, errors.New("new provider: Options.Kind is required")
	}
	caps := eng.Capabilities()
	if !caps.Isolated && !path.IsAbs(o.SandboxMCPCommand) {
		return nil, fmt.Errorf("new provider: %s: an engine without isolation runs the host's sandbox-mcp: set Options.SandboxMCPCommand to its absolute path", o.Kind)
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SidecarTimeout <= 0 {
		o.SidecarTimeout = SidecarWaitTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.HTTPClient == nil {
		if pc, ok := eng.(engine.PortClienter); ok {
			o.HTTPClient = pc.PortClient()
		}
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Provider{eng: eng, caps: caps, o: o, log: log.With("component", "provider", "provider", string(o.Kind)), hc: hc}, nil
}

// Engine is the engine the provider runs its sandboxes on.
func (p *Provider) Engine() engine.Engine { return p.eng }

// Kind is Options.Kind.
func (p *Provider) Kind() Kind { return p.o.Kind }

// Capabilities follow the engine's: pause where the engine pauses and resumes (a
// paused sandbox is its own restore point).
func (p *Provider) Capabilities() Capabilities {
	return Capabilities{SupportsPause: p.caps.Pause}
}

// httpStatuser is an error of an engine over an HTTP API that knows its status.
type httpStatuser interface{ HTTPStatus() int }

// ConfigError is an error about the host's own settings. Its text is a constant that
// names environment variables (E2B_TEMPLATE, …), which secret redaction would take for
// keys, so it reaches the ProviderError as it is; it is never retryable.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

func (p *Provider) fail(op Operation, err error) *ProviderError {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe
	}
	var ce *ConfigError
	if errors.As(err, &ce) {
		return &ProviderError{Provider: p.o.Kind, Operation: op, Raw: ce.Msg,
			Message: "[" + string(p.o.Kind) + ":" + string(op) + "] " + ce.Msg}
	}
	e := FromError(err, p.o.Kind, op)
	var hs httpStatuser
	if errors.As(err, &hs) {
		e.StatusCode = hs.HTTPStatus()
		e.Retryable = e.Retryable || IsRetryableStatus(e.StatusCode) || e.StatusCode >= 500
	}
	return e
}

// Health reports whether the engine answers a list.
func (p *Provider) Health(ctx context.Context) bool {
	_, err := p.eng.List(ctx)
	return err == nil
}

// CheckSandboxes returns the ids of ids whose sandbox is running, in input order. It
// only lists: nothing is resumed.
func (p *Provider) CheckSandboxes(ctx context.Context, ids []string) ([]string, error) {
	out := []string{}
	if len(ids) == 0 {
		return out, nil
	}
	infos, err := p.eng.List(ctx)
	if err != nil {
		p.log.Warn("check sandboxes: list failed", "err", RedactSecrets(err.Error()))
		return out, nil
	}
	running := map[string]bool{}
	for _, in := range infos {
		if in.State == engine.StateRunning {
			running[in.ID] = true
		}
	}
	for _, id := range ids {
		if running[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// running describes a sandbox that runs now, or fails with engine.ErrNotFound.
func (p *Provider) running(ctx context.Context, id string) (engine.Info, error) {
	if id == "" {
		return engine.Info{}, fmt.Errorf("sandbox id is empty: %w", engine.ErrNotFound)
	}
	info, err := p.eng.Get(ctx, id)
	if err != nil {
		return info, err
	}
	if info.State != engine.StateRunning {
		return info, fmt.Errorf("sandbox %s is %s: %w", id, info.State, engine.ErrNotFound)
	}
	return info, nil
}

// EnsureSandbox returns opts.CurrentSandboxID when it runs (never resuming a paused
// one), else creates.
func (p *Provider) EnsureSandbox(ctx context.Context, opts CreateOptions) (EnsureResult, error) {
	if opts.CurrentSandboxID != "" {
		if info, err := p.running(ctx, opts.CurrentSandboxID); err == nil {
			res := p.result(ctx, info, true, true)
			p.log.Info("sandbox recovered", "sandbox_id", info.ID)
			return EnsureResult{CreateResult: res, Recovered: true}, nil
		}
	}
	r, err := p.CreateSandbox(ctx, opts)
	return EnsureResult{CreateResult: r}, err
}

// CreateSandbox boots a sandbox (Boot) and returns once sandbox-mcp answers healthy.
func (p *Provider) CreateSandbox(ctx context.Context, opts CreateOptions) (CreateResult, error) {
	b, err := p.Boot(ctx, opts)
	if err != nil {
		return CreateResult{}, err
	}
	return b.CreateResult, nil
}

// Snapshot stores the sandbox's writable state; the id restores it
// (CreateOptions.SnapshotID).
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (SnapshotResult, error) {
	if err := p.RefuseBastion(ctx, sandboxID, OpSnapshot); err != nil {
		return SnapshotResult{}, err
	}
	id, err := p.eng.Snapshot(ctx, sandboxID)
	if err != nil {
		return SnapshotResult{}, p.fail(OpSnapshot, fmt.Errorf("snapshot sandbox %s: %w", sandboxID, err))
	}
	return SnapshotResult{SnapshotID: id}, nil
}

// Pause pauses the sandbox on an engine that can; the snapshot id is the sandbox's,
// which a create with it as SnapshotID resumes. An already paused sandbox is success.
func (p *Provider) Pause(ctx context.Context, sessionID, sandboxID string) (SnapshotResult, error) {
	if !p.caps.Pause {
		return SnapshotResult{}, PauseUnsupportedError(p.o.Kind)
	}
	if sandboxID == "" {
		return SnapshotResult{}, NewProviderError(p.o.Kind, OpPause, "sandboxId is required for pause", false, nil)
	}
	if err := p.RefuseBastion(ctx, sandboxID, OpPause); err != nil {
		return SnapshotResult{}, err
	}
	if err := p.eng.Pause(ctx, sandboxID); err != nil {
		return SnapshotResult{}, p.fail(OpPause, err)
	}
	return SnapshotResult{SnapshotID: sandboxID}, nil
}

// Terminate ends the sandbox; one already gone is success.
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	if sandboxID == "" {
		return MissingSandboxIDError(p.o.Kind)
	}
	if handled, err := p.terminatePair(ctx, sandboxID); handled { // a bastion session ends whole
		return p.failUnlessGone(OpTerminate, err)
	}
	err := p.eng.Terminate(ctx, sandboxID)
	if err == nil || errors.Is(err, engine.ErrNotFound) || IsNotFoundMessage(err.Error()) {
		return nil
	}
	return p.fail(OpTerminate, err)
}

// paths is the layout of a sandbox as its processes see it.
func (p *Provider) paths(info engine.Info) Paths {
	if p.caps.Isolated {
		return DefaultPaths()
	}
	return RootedPaths(info.Home)
}

// WriteEnvFile merges envVars into the sandbox's env override file.
func (p *Provider) WriteEnvFile(ctx context.Context, sandboxID string, envVars map[string]string) error {
	info, err := p.running(ctx, sandboxID)
	if err != nil {
		return p.fail(OpWriteEnvFile, err)
	}
	file := p.paths(info).EnvOverrideFile()
	old, err := p.eng.ReadFile(ctx, sandboxID, file)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return p.fail(OpWriteEnvFile, err)
	}
	if err := p.eng.WriteFile(ctx, sandboxID, file, MergeEnvFile(old, envVars), 0o600); err != nil {
		return p.fail(OpWriteEnvFile, err)
	}
	return nil
}

// ExecCommand runs argv without a shell in cwd (default: the workspace) with env,
// under the timeout (default ExecTimeout). Output is capped; a timeout is exit code
// 124, as with coreutils timeout.
func (p *Provider) ExecCommand(ctx context.Context, sandboxID string, argv []string, o ExecOptions) (ExecResult, error) {
	if len(argv) == 0 {
		return ExecResult{}, NewProviderError(p.o.Kind, OpExecCommand, "argv is required", false, nil)
	}
	info, err := p.running(ctx, sandboxID)
	if err != nil {
		return ExecResult{}, p.fail(OpExecCommand, err)
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = ExecTimeout
	}
	cwd := o.Cwd
	if cwd == "" {
		cwd = p.paths(info).Workspace()
	}
	env := make([]string, 0, len(o.Env))
	for _, kv := range o.Env {
		env = append(env, kv.Key+"="+kv.Value)
	}
	res, _, err := p.run(ctx, sandboxID, engine.ExecRequest{Argv: argv, Cwd: cwd, Env: env, Timeout: timeout})
	if err != nil {
		return ExecResult{}, p.fail(OpExecCommand, err)
	}
	res.Stdout, res.Stderr = CapOutput(res.Stdout, 0), CapOutput(res.Stderr, 0)
	return res, nil
}

// ReadFiles returns every regular file under folder (absolute inside the sandbox, or
// relative to its home), with paths relative to folder, in name order, depth first. A
// missing folder is an empty result; unreadable files and symlinks are skipped.
func (p *Provider) ReadFiles(ctx context.Context, sandboxID, folder string) ([]FileContent, error) {
	info, err := p.running(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(OpReadFiles, err)
	}
	folder = strings.TrimSuffix(folder, "/")
	if !path.IsAbs(folder) {
		folder = path.Join(p.paths(info).Home, folder)
	}
	out := []FileContent{}
	var walk func(dir, rel string, depth int) error
	walk = func(dir, rel string, depth int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := p.eng.ListFiles(ctx, sandboxID, dir)
		if err != nil || depth > 64 {
			return nil // missing, unreadable or absurdly deep: skipped
		}
		slices.SortFunc(entries, func(a, b engine.FileInfo) int { return strings.Compare(a.Name, b.Name) })
		for _, en := range entries {
			switch {
			case en.IsDir:
				if err := walk(path.Join(dir, en.Name), path.Join(rel, en.Name), depth+1); err != nil {
					return err
				}
			case fs.FileMode(en.Mode).IsRegular():
				data, err := p.eng.ReadFile(ctx, sandboxID, path.Join(dir, en.Name))
				if err != nil {
					continue
				}
				out = append(out, FileContent{Path: path.Join(rel, en.Name), Data: data})
			}
		}
		return nil
	}
	if err := walk(folder, "", 0); err != nil {
		return nil, p.fail(OpReadFiles, err)
	}
	return out, nil
}

// TestServiceCommands runs each command to completion or its timeout and reports its
// capped output and exit code.
func (p *Provider) TestServiceCommands(ctx context.Context, sandboxID string, cmds []ConfigurationServiceCommand, o ServiceTestOptions) ([]ServiceTestResult, error) {
	info, err := p.running(ctx, sandboxID)
	if err != nil {
		return nil, p.fail(OpTestServiceCommands, err)
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	runOne := func(ctx context.Context, cwd, command, logFile string) (ExecResult, error) {
		req := engine.ExecRequest{Argv: []string{"sh", "-c", BuildServiceTestCommand(cwd, command, logFile, timeout)}}
		if timeout > 0 {
			req.Timeout = timeout + 5*time.Second
		}
		r, _, err := p.run(ctx, sandboxID, req)
		r.Stderr = "" // the script prints the log on stdout
		return r, err
	}
	return RunServiceTests(ctx, p.paths(info), cmds, o.RunID, runOne), nil
}

// Sidecar returns the URL of a sandbox's sandbox-mcp API and its token, read from
// the sandbox's environment: whoever can drive the engine can reach the sidecar.
func (p *Provider) Sidecar(ctx context.Context, sandboxID string) (url, token string, err error) {
	info, err := p.running(ctx, sandboxID)
	if err != nil {
		return "", "", err
	}
	return p.sidecarOf(ctx, sandboxID, info)
}

// sidecarOf is Sidecar of the running sandbox sandboxID, whose Get is info.
func (p *Provider) sidecarOf(ctx context.Context, sandboxID string, info engine.Info) (url, token string, err error) {
	token, envURL, err := p.sidecarEnv(ctx, sandboxID)
	if err != nil {
		return "", "", err
	}
	if p.caps.Isolated {
		url, err = p.portURL(ctx, info, PortSandboxMCP)
	} else {
		url = envURL
	}
	if url == "" && err == nil {
		err = fmt.Errorf("sandbox %s: no URL reaches its sidecar's port %d", sandboxID, PortSandboxMCP)
	}
	return url, token, err
}

// sidecarEnv reads the sidecar's token and URL from a sandbox's environment.
func (p *Provider) sidecarEnv(ctx context.Context, sandboxID string) (token, url string, err error) {
	res, _, err := p.run(ctx, sandboxID, engine.ExecRequest{Argv: []string{"printenv", EnvSandboxMCPAuthToken, rules.EnvSidecarURL},
		Timeout: 30 * time.Second})
	if err != nil {
		return "", "", fmt.Errorf("read the sidecar token of sandbox %s: %w", sandboxID, err)
	}
	lines := strings.Split(strings.TrimRight(res.Stdout, "\n"), "\n")
	if lines[0] == "" {
		return "", "", fmt.Errorf("sandbox %s has no %s in its environment (was it created by this provider?)", sandboxID, EnvSandboxMCPAuthToken)
	}
	if len(lines) > 1 {
		url = lines[1]
	}
	return lines[0], url, nil
}
