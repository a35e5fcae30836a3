package e2b

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// EnvLocalTunnels, when "1" or "true", makes the provider ask the local server
// (e2bserver) for the URL of a sandbox port instead of building <port>-<id>.<domain>.
const EnvLocalTunnels = provider.EnvE2BLocalTunnels

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
	// SidecarTimeout bounds the wait for sandbox-mcp's health; zero means
	// provider.SidecarWaitTimeout.
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
		o.SidecarTimeout = provider.SidecarWaitTimeout
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
	var ae *e2bwire.APIError
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
	_, err := p.client.List(ctx, ListOptions{Limit: 1, States: []string{e2bwire.StateRunning}})
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
	all, err := p.client.List(ctx, ListOptions{States: []string{e2bwire.StateRunning}})
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
