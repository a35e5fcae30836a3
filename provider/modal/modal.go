// Package modal is the engine (engine.Engine) on Modal's maintained Go SDK
// (github.com/modal-labs/modal-client/go). It checks the token pair's shape before
// any call, creates the app if missing, and creates sandboxes from the base image
// defined in Go (or a snapshot's image), with their ports tunnelled encrypted; the
// one provider (provider.New) boots the platform's sandboxes on it.
//
// The SDK reads MODAL_SERVER_URL from the process environment; pointed at the local
// Modal-compatible server (package modalserver, `sandboxctl serve --protocol modal`)
// the engine runs end to end on this machine.
package modal

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"
	"google.golang.org/grpc"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
)

// TunnelTimeout bounds the wait for a sandbox's tunnels.
const TunnelTimeout = 30 * time.Second

// DefaultTimeout is the lifetime Modal gives a sandbox created without one; Create
// says it explicitly, so that the egress gateway's credential is bounded by it too.
const DefaultTimeout = 5 * time.Minute

// Options configure NewEngine.
type Options struct {
	// Getenv reads MODAL_TOKEN_ID/SECRET, MODAL_APP_NAME[/SUFFIX], MODAL_BASE_SNAPSHOT_ID
	// and the host settings; nil means os.Getenv. (The SDK itself reads
	// MODAL_SERVER_URL and MODAL_ENVIRONMENT from the process environment.)
	Getenv func(string) string
	// Image is the base image; nil means DefaultBaseImage(Getenv).
	Image *BaseImage
	// TLS dials the encrypted tunnels (DialPort, PortClient); nil means the system
	// roots.
	TLS *tls.Config
	// Logger receives the SDK's logs; nil discards.
	Logger *slog.Logger
	// Gateway is the egress gateway that carries Spec.Secrets; without it a spec with
	// secrets is refused.
	Gateway *gateway.Engine
}

// Engine is engine.Engine on Modal (or the local Modal-compatible server). It holds
// an SDK client (Close closes it); all sandbox state lives in Modal.
type Engine struct {
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
}

// NewEngine returns an Engine; it makes no call until one is needed.
func NewEngine(o Options) *Engine {
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	img := DefaultBaseImage(o.Getenv)
	if o.Image != nil {
		img = *o.Image
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Engine{o: o, log: log.With("component", "modal-engine"), image: img}
}

// Close closes the SDK client; sandboxes keep running.
func (p *Engine) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.client != nil {
		p.client.Close()
		p.client = nil
	}
	return nil
}

func (p *Engine) env(k string) string {
	v, _ := NormalizeEnvValue(p.o.Getenv(k))
	return v
}

func (p *Engine) fail(op provider.Operation, err error) *provider.ProviderError {
	return provider.FromError(err, provider.KindModal, op)
}

// connect runs the auth preflight, makes the SDK client and gets (or creates) the
// app. The app is cached; a failure is not, so a later call retries.
func (p *Engine) connect(ctx context.Context, op provider.Operation) (*modalsdk.Client, *modalsdk.App, error) {
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

// sandbox attaches to a sandbox by id (no call is made).
func (p *Engine) sandboxByID(ctx context.Context, id string) (*modalsdk.Sandbox, error) {
	c, _, err := p.connect(ctx, provider.OpExecCommand)
	if err != nil {
		return nil, err
	}
	return c.Sandboxes.FromID(ctx, id, nil)
}

// wholeSeconds rounds a timeout up to whole seconds (the SDK takes no fractions).
func wholeSeconds(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}
