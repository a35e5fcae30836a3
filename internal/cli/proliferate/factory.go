package proliferate

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// IOStreams are the command's standard streams.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
}

// Factory carries what commands need from the outside; tests build their own
// to shorten delays.
type Factory struct {
	IO     IOStreams
	Getenv func(string) string
	Now    func() time.Time

	// HTTPClient is shared by the sidecar and gateway clients.
	HTTPClient *http.Client
	// RetryDelay is the pause between retries of a refused sidecar connection.
	RetryDelay time.Duration
	// ActionPoll is the interval of action approval polls.
	ActionPoll time.Duration
	// LogsFirstFrameWait is how long `services logs` without --follow waits
	// for a first payload before it reports an empty log.
	LogsFirstFrameWait time.Duration
	// OverridesFile replaces the env overrides file of the configuration when set.
	OverridesFile string
	// ServicePoll is the interval of `services wait` and `start --wait` polls.
	ServicePoll time.Duration

	// sidecar is set once Sidecar made a client: where it points and why, so
	// errors can name the URL and the variables to change.
	sidecar *sidecarTarget
}

// sidecarTarget is the sidecar a command talks to.
type sidecarTarget struct {
	url, urlFrom, tokenFrom string
}

func newFactory(getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) *Factory {
	return &Factory{
		IO:          IOStreams{In: stdin, Out: stdout, ErrOut: stderr},
		Getenv:      getenv,
		Now:         time.Now,
		HTTPClient:  &http.Client{},
		RetryDelay:  sidecar.DefaultRetryDelay,
		ActionPoll:  grants.DefaultPollInterval,
		ServicePoll: 250 * time.Millisecond,

		LogsFirstFrameWait: 2 * time.Second,
	}
}

// config reads what the CLI needs of the environment through internal/config.
func (f *Factory) config() config.Client { return config.LoadClient(f.Getenv) }

// errNoToken is the contract's message when neither token variable is set.
const errNoToken = rules.NoToken

// Sidecar returns the sidecar client; no token or a URL that is not
// http(s)://host[:port] is a usage error. While a refused connection is
// retried it says once on stderr what it is waiting for.
func (f *Factory) Sidecar() (*sidecar.Client, error) {
	cfg := f.config()
	if cfg.Token == "" {
		return nil, usageErrorf("%s", errNoToken)
	}
	t := &sidecarTarget{url: cfg.SidecarURL, urlFrom: cfg.SidecarURLFrom, tokenFrom: cfg.TokenFrom}
	var once sync.Once
	c, err := sidecar.New(sidecar.Options{BaseURL: cfg.SidecarURL, Token: cfg.Token, HTTPClient: f.HTTPClient, RetryDelay: f.RetryDelay,
		OnRetry: func(error, int) {
			once.Do(func() { fmt.Fprintf(f.IO.ErrOut, "waiting for the sidecar at %s…\n", cfg.SidecarURL) })
		}})
	if err != nil {
		from := t.urlFrom
		if from == "" {
			from = "the default URL"
		}
		return nil, usageErrorf("sidecar URL %q (from %s) is not a URL; want http://host:port, e.g. %s", cfg.SidecarURL, from, config.DefaultSidecarURL)
	}
	f.sidecar = t
	return c, nil
}

// explain adds to a failed sidecar call where the CLI looked and which
// variables set that: a connection that failed names the URL, a rejected
// token names the variable it came from. API answers keep their message.
func (t *sidecarTarget) explain(err error) error {
	var ae *sidecar.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		// The last line stays the contract's "Error: Unauthorized", which agents
		// match on; the hint goes on its own line before it.
		return &hintedError{err: err, hint: fmt.Sprintf("the sidecar at %s rejected the token from %s", t.url, t.tokenFrom)}
	case errors.As(err, &ae):
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) {
		from := "set " + rules.EnvSidecarURL + " to change it"
		if t.urlFrom != "" {
			from = "from " + t.urlFrom
		}
		return fmt.Errorf("cannot reach the sidecar at %s (%s): %w", t.url, from, err)
	}
	return err
}

// Gateway returns the actions gateway client.
func (f *Factory) Gateway() (*grants.Client, error) {
	cfg := f.config()
	c, err := grants.New(grants.Options{
		GatewayURL: cfg.GatewayURL, SessionID: cfg.SessionID, Token: cfg.Token,
		HTTPClient: f.HTTPClient, PollInterval: f.ActionPoll, Now: f.Now,
	})
	if errors.Is(err, grants.ErrNoToken) {
		return nil, usageErrorf("%s", err.Error())
	}
	return c, err
}
