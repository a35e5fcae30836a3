// Package modal is the Modal SandboxProvider on Modal's maintained Go SDK
// (github.com/modal-labs/modal-client/go). It checks the token pair's shape before
// any call, creates the app if missing, resolves the image (restore snapshot, base
// snapshot, or the base image defined in Go), creates the sandbox named after the
// session with the OpenCode and preview ports encrypted and ssh raw, and runs the boot
// plan (provider.BuildPlan) through the SDK's Exec and filesystem calls.
//
// The SDK reads MODAL_SERVER_URL from the process environment; pointed at the local
// Modal-compatible server (package modalserver, `sandboxctl serve --protocol modal`)
// the provider runs end to end on this machine.
package modal

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// Resources of every sandbox.
const (
	CPU       = 2
	MemoryMiB = 4096
)

// TunnelTimeout bounds the wait for a sandbox's tunnels.
const TunnelTimeout = 30 * time.Second

// Options configure a Provider.
type Options struct {
	// Getenv reads MODAL_TOKEN_ID/SECRET, MODAL_APP_NAME[/SUFFIX], MODAL_BASE_SNAPSHOT_ID
	// and the host settings; nil means os.Getenv. (The SDK itself reads
	// MODAL_SERVER_URL and MODAL_ENVIRONMENT from the process environment.)
	Getenv func(string) string
	// Image is the base image; nil means DefaultBaseImage(Getenv).
	Image *BaseImage
	// HTTPClient probes OpenCode through its tunnel; nil means a default client.
	HTTPClient *http.Client
	// ReadyWait bounds the OpenCode readiness wait (a warning only); zero means
	// provider.OpenCodeReadyWait.
	ReadyWait time.Duration
	// SandboxMCPCommand is how the boot starts sandbox-mcp; empty means "sandbox-mcp".
	SandboxMCPCommand string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logger receives boot steps and background failures; nil discards.
	Logger *slog.Logger
	// GitMirrors makes the bundles of tokenless git steps on the host; nil means
	// provider.DefaultGitMirrors.
	GitMirrors provider.GitBundler
}

// Provider is the Modal SandboxProvider. A Provider holds an SDK client (close it with
// Close); all sandbox state lives in Modal.
type Provider struct {
	o     Options
	log   *slog.Logger
	image BaseImage

	mu     sync.Mutex
	client *modalsdk.Client
	app    *modalsdk.App

	// cp is the SDK's control-plane connection (captureConn), for the calls the SDK
	// does not make itself (VolumeList).
	cpMu sync.Mutex
	cp   *grpc.ClientConn

	bg sync.WaitGroup
}

var (
	_ provider.SandboxProvider = (*Provider)(nil)
	_ provider.SandboxChecker  = (*Provider)(nil)
	_ provider.CommandExecer   = (*Provider)(nil)
	_ provider.FileReader      = (*Provider)(nil)
	_ provider.ServiceTester   = (*Provider)(nil)
)

// New returns a Provider; it makes no call until one is needed.
func New(o Options) *Provider {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	img := DefaultBaseImage(o.Getenv)
	if o.Image != nil {
		img = *o.Image
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Provider{o: o, log: log.With("component", "modal-provider"), image: img}
}

// Close waits for the background boot phases this Provider started and closes its
// SDK client.
func (p *Provider) Close() {
	p.bg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		p.client.Close()
		p.client = nil
	}
}

// Kind is provider.KindModal.
func (p *Provider) Kind() provider.Kind { return provider.KindModal }

// Capabilities: no pause, no auto-pause; memory snapshots are not implemented here.
func (p *Provider) Capabilities() provider.Capabilities { return provider.Capabilities{} }

func (p *Provider) env(k string) string {
	v, _ := NormalizeEnvValue(p.o.Getenv(k))
	return v
}

func (p *Provider) fail(op provider.Operation, err error) *provider.ProviderError {
	return provider.FromError(err, provider.KindModal, op)
}

// connect runs the auth preflight, makes the SDK client and gets (or creates) the
// app. The app is cached; a failure is not, so a later call retries.
func (p *Provider) connect(ctx context.Context, op provider.Operation) (*modalsdk.Client, *modalsdk.App, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.app != nil {
		return p.client, p.app, nil
	}
	id, secret := p.env(provider.EnvModalTokenID), p.env(provider.EnvModalTokenSecret)
	if AuthPreflight(id, secret) != nil {
		// No call is made with a mis-shaped pair; the hint says what is wrong. (With
		// neither set, the SDK uses ~/.modal.toml.)
		return nil, nil, provider.NewProviderError(provider.KindModal, op, AuthConfigHint(id, secret), false, nil)
	}
	name, err := AppName(p.o.Getenv)
	if err != nil {
		return nil, nil, provider.NewProviderError(provider.KindModal, op, err.Error(), false, nil)
	}
	if p.client == nil {
		c, err := modalsdk.NewClientWithOptions(&modalsdk.ClientParams{TokenID: id, TokenSecret: secret, Logger: p.log,
			GRPCUnaryInterceptors: []grpc.UnaryClientInterceptor{p.captureConn}})
		if err != nil {
			return nil, nil, p.fail(op, err)
		}
		p.client = c
	}
	app, err := p.client.Apps.FromName(ctx, name, &modalsdk.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		msg := err.Error()
		if hint := AuthConfigHint(id, secret); hint != "" && strings.Contains(strings.ToLower(msg), "token") {
			msg = hint + " (" + msg + ")"
		}
		return nil, nil, provider.NewProviderError(provider.KindModal, op, msg, false, err)
	}
	p.app = app
	return p.client, p.app, nil
}

// Health: the preflight and a list call succeed.
func (p *Provider) Health(ctx context.Context) bool {
	c, app, err := p.connect(ctx, provider.OpHealth)
	if err != nil {
		return false
	}
	seq, err := c.Sandboxes.List(ctx, &modalsdk.SandboxListParams{AppID: app.AppID})
	if err != nil {
		return false
	}
	for _, err := range seq {
		return err == nil
	}
	return true
}

// sandbox attaches to a sandbox by id (no call is made).
func (p *Provider) sandbox(ctx context.Context, op provider.Operation, id string) (*modalsdk.Sandbox, error) {
	c, _, err := p.connect(ctx, op)
	if err != nil {
		return nil, err
	}
	sb, err := c.Sandboxes.FromID(ctx, id, nil)
	if err != nil {
		return nil, p.fail(op, err)
	}
	return sb, nil
}

// CheckSandboxes lists the app's running sandboxes (a list call only: nothing is
// resumed) and returns the ids of ids among them, in input order.
func (p *Provider) CheckSandboxes(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return []string{}, nil
	}
	c, app, err := p.connect(ctx, provider.OpCheckSandboxes)
	if err != nil {
		return nil, err
	}
	alive := map[string]bool{}
	seq, err := c.Sandboxes.List(ctx, &modalsdk.SandboxListParams{AppID: app.AppID})
	if err == nil {
		for sb, lerr := range seq {
			if lerr != nil {
				err = lerr
				break
			}
			alive[sb.SandboxID] = true
		}
	}
	if err != nil {
		p.log.Warn("checkSandboxes: list failed", "err", provider.RedactSecrets(err.Error()))
		return []string{}, nil
	}
	out := []string{}
	for _, id := range ids {
		if alive[id] {
			out = append(out, id)
		}
	}
	return out, nil
}

// Tunnels are a sandbox's URLs.
type Tunnels struct {
	OpenCodeURL, PreviewURL string
	SSHHost                 string
	SSHPort                 int
}

// ResolveTunnels returns the OpenCode and preview URLs (and ssh) of a sandbox.
func (p *Provider) ResolveTunnels(ctx context.Context, sandboxID string) (Tunnels, error) {
	sb, err := p.sandbox(ctx, provider.OpResolveTunnels, sandboxID)
	if err != nil {
		return Tunnels{}, err
	}
	t, err := tunnels(ctx, sb)
	if err != nil {
		return Tunnels{}, p.fail(provider.OpResolveTunnels, err)
	}
	return t, nil
}

func tunnels(ctx context.Context, sb *modalsdk.Sandbox) (Tunnels, error) {
	ts, err := sb.Tunnels(ctx, TunnelTimeout, nil)
	if err != nil {
		return Tunnels{}, err
	}
	var out Tunnels
	if t := ts[provider.PortOpenCode]; t != nil {
		out.OpenCodeURL = t.URL()
	}
	if t := ts[provider.PortPreview]; t != nil {
		out.PreviewURL = t.URL()
	}
	if t := ts[provider.PortSSH]; t != nil {
		if h, port, err := t.TCPSocket(); err == nil {
			out.SSHHost, out.SSHPort = h, port
		}
	}
	return out, nil
}

// EnsureSandbox recovers the running sandbox named after the session, else the
// currentSandboxId when it still runs, else creates one.
func (p *Provider) EnsureSandbox(ctx context.Context, opts provider.CreateOptions) (provider.EnsureResult, error) {
	c, _, err := p.connect(ctx, provider.OpCreateSandbox)
	if err != nil {
		return provider.EnsureResult{}, err
	}
	name, _ := AppName(p.o.Getenv)
	var found *modalsdk.Sandbox
	if sb, err := c.Sandboxes.FromName(ctx, name, opts.SessionID, nil); err == nil {
		found = sb
	} else if opts.CurrentSandboxID != "" {
		if sb, err := c.Sandboxes.FromID(ctx, opts.CurrentSandboxID, nil); err == nil {
			if code, err := sb.Poll(ctx, nil); err == nil && code == nil {
				found = sb
			}
		}
	}
	if found != nil {
		t, err := tunnels(ctx, found)
		if err == nil {
			return provider.EnsureResult{Recovered: true, CreateResult: provider.CreateResult{SandboxID: found.SandboxID,
				TunnelURL: t.OpenCodeURL, PreviewURL: t.PreviewURL, SSHHost: t.SSHHost, SSHPort: t.SSHPort}}, nil
		}
		p.log.Warn("ensureSandbox: found sandbox has no tunnels; creating", "sandbox", found.SandboxID, "err", provider.RedactSecrets(err.Error()))
	}
	res, err := p.CreateSandbox(ctx, opts)
	return provider.EnsureResult{CreateResult: res}, err
}

// Snapshot takes a filesystem snapshot; its image id restores the sandbox.
func (p *Provider) Snapshot(ctx context.Context, sessionID, sandboxID string) (provider.SnapshotResult, error) {
	sb, err := p.sandbox(ctx, provider.OpSnapshot, sandboxID)
	if err != nil {
		return provider.SnapshotResult{}, err
	}
	img, err := sb.SnapshotFilesystem(ctx, nil)
	if err != nil {
		return provider.SnapshotResult{}, p.fail(provider.OpSnapshot, err)
	}
	return provider.SnapshotResult{SnapshotID: img.ImageID}, nil
}

// Pause is not supported on Modal.
func (p *Provider) Pause(ctx context.Context, sessionID, sandboxID string) (provider.SnapshotResult, error) {
	return provider.SnapshotResult{}, provider.PauseUnsupportedError(provider.KindModal)
}

// Terminate ends the sandbox; one that is already gone is success.
func (p *Provider) Terminate(ctx context.Context, sessionID, sandboxID string) error {
	if sandboxID == "" {
		return provider.MissingSandboxIDError(provider.KindModal)
	}
	sb, err := p.sandbox(ctx, provider.OpTerminate, sandboxID)
	if err != nil {
		return err
	}
	if _, err := sb.Terminate(ctx, nil); err != nil {
		var nf modalsdk.NotFoundError
		if errors.As(err, &nf) || provider.IsNotFoundMessage(strings.ToLower(err.Error())) || strings.Contains(err.Error(), "NotFound") {
			return nil
		}
		return p.fail(provider.OpTerminate, err)
	}
	return nil
}

// WriteEnvFile merges envVars into the sandbox's env override file.
func (p *Provider) WriteEnvFile(ctx context.Context, sandboxID string, envVars map[string]string) error {
	sb, err := p.sandbox(ctx, provider.OpWriteEnvFile, sandboxID)
	if err != nil {
		return err
	}
	path := provider.DefaultPaths().EnvOverrideFile()
	existing, err := sb.Filesystem.ReadBytes(ctx, path, nil)
	var nf modalsdk.SandboxFilesystemNotFoundError
	if err != nil && !errors.As(err, &nf) {
		return p.fail(provider.OpWriteEnvFile, err)
	}
	if err := sb.Filesystem.WriteBytes(ctx, provider.MergeEnvFile(existing, envVars), path, nil); err != nil {
		return p.fail(provider.OpWriteEnvFile, err)
	}
	return nil
}

// run execs argv and returns its output and exit code.
func run(ctx context.Context, sb *modalsdk.Sandbox, argv []string, params *modalsdk.SandboxExecParams) (provider.ExecResult, error) {
	proc, err := sb.Exec(ctx, argv, params)
	if err != nil {
		return provider.ExecResult{}, err
	}
	var stdout, stderr []byte
	var wg sync.WaitGroup
	var errOut error
	wg.Add(1)
	go func() {
		defer wg.Done()
		stderr, errOut = io.ReadAll(proc.Stderr)
	}()
	stdout, err = io.ReadAll(proc.Stdout)
	wg.Wait()
	if err == nil {
		err = errOut
	}
	if err != nil {
		return provider.ExecResult{}, err
	}
	code, err := proc.Wait(ctx, nil)
	if err != nil {
		return provider.ExecResult{}, err
	}
	return provider.ExecResult{Stdout: string(stdout), Stderr: string(stderr), ExitCode: code}, nil
}

// ExecCommand runs argv (no shell interpolation) per HOST.md §15.9.
func (p *Provider) ExecCommand(ctx context.Context, sandboxID string, argv []string, o provider.ExecOptions) (provider.ExecResult, error) {
	sb, err := p.sandbox(ctx, provider.OpExecCommand, sandboxID)
	if err != nil {
		return provider.ExecResult{}, err
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = provider.ExecTimeout
	}
	r, err := run(ctx, sb, provider.BuildModalExecArgv(argv, o.Cwd, o.Env, timeout), nil)
	if err != nil {
		return provider.ExecResult{}, p.fail(provider.OpExecCommand, err)
	}
	r.Stdout = provider.CapOutput(r.Stdout, provider.DefaultCapOutput)
	r.Stderr = provider.CapOutput(r.Stderr, provider.DefaultCapOutput)
	return r, nil
}

// ReadFiles returns every regular file under folder (find, then one read each); a
// missing folder is an empty result and unreadable files are skipped.
func (p *Provider) ReadFiles(ctx context.Context, sandboxID, folder string) ([]provider.FileContent, error) {
	sb, err := p.sandbox(ctx, provider.OpReadFiles, sandboxID)
	if err != nil {
		return nil, err
	}
	folder = strings.TrimSuffix(folder, "/")
	// find's exit status is not looked at: it is 1 for a missing folder (nothing
	// listed) and also when one subdirectory cannot be read (the rest is still
	// listed, and unreadable entries are skipped). -print0: a name may hold a newline.
	r, err := run(ctx, sb, []string{"find", folder, "-type", "f", "-print0"}, nil)
	if err != nil {
		return nil, p.fail(provider.OpReadFiles, err)
	}
	out := []provider.FileContent{}
	for f := range strings.SplitSeq(r.Stdout, "\x00") {
		if f == "" {
			continue
		}
		data, err := sb.Filesystem.ReadBytes(ctx, f, nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, p.fail(provider.OpReadFiles, ctx.Err())
			}
			continue
		}
		out = append(out, provider.FileContent{Path: strings.TrimPrefix(f, folder+"/"), Data: data})
	}
	return out, nil
}

// TestServiceCommands runs each command to completion or its timeout (§15.8).
func (p *Provider) TestServiceCommands(ctx context.Context, sandboxID string, cmds []provider.ConfigurationServiceCommand, o provider.ServiceTestOptions) ([]provider.ServiceTestResult, error) {
	sb, err := p.sandbox(ctx, provider.OpTestServiceCommands, sandboxID)
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(o.TimeoutMs) * time.Millisecond
	runOne := func(ctx context.Context, cwd, command, logFile string) (provider.ExecResult, error) {
		r, err := run(ctx, sb, []string{"sh", "-c", provider.BuildServiceTestCommand(cwd, command, logFile, timeout)}, nil)
		r.Stderr = "" // the script prints the log on stdout
		return r, err
	}
	return provider.RunServiceTests(ctx, provider.DefaultPaths(), cmds, o.RunID, runOne), nil
}

// readMetadata reads the session metadata a restored sandbox carries.
func readMetadata(ctx context.Context, sb *modalsdk.Sandbox) *provider.SessionMetadata {
	return provider.ParseSessionMetadata(sb.Filesystem.ReadBytes(ctx, provider.DefaultPaths().MetadataFile(), nil))
}
