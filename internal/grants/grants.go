// Package grants is the client of the platform's actions gateway that
// `proliferate actions` uses: listing actions, reading guides, running an
// action (waiting for a human's approval when the gateway asks for it) and
// requesting grants. cmd/proliferate imports it.
package grants

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// Defaults of the wire contract.
const (
	DefaultTimeout      = 120 * time.Second
	DefaultPollInterval = 2 * time.Second
)

// Options configures a Client.
type Options struct {
	// GatewayURL is PROLIFERATE_GATEWAY_URL and SessionID is
	// PROLIFERATE_SESSION_ID; both are required.
	GatewayURL string
	SessionID  string
	// Token is the bearer token. Required.
	Token string
	// HTTPClient sends the requests; nil means a client of its own.
	HTTPClient *http.Client
	// Timeout bounds each request; 0 means DefaultTimeout.
	Timeout time.Duration
	// PollInterval is the pause between approval polls; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// Now is the clock for elapsed times; nil means time.Now.
	Now func() time.Time
}

// ErrNotConfigured is returned by New when the gateway URL or session is missing.
var ErrNotConfigured = errors.New("Actions require PROLIFERATE_GATEWAY_URL and PROLIFERATE_SESSION_ID")

// ErrNoToken is returned by New when no token is set.
var ErrNoToken = errors.New(rules.NoToken)

// Client talks to {gateway}/proliferate/{session}/actions.
type Client struct {
	base     string
	token    string
	hc       *http.Client
	timeout  time.Duration
	interval time.Duration
	now      func() time.Time
}

// New returns a Client, or ErrNotConfigured / ErrNoToken.
func New(o Options) (*Client, error) {
	if o.GatewayURL == "" || o.SessionID == "" {
		return nil, ErrNotConfigured
	}
	if o.Token == "" {
		return nil, ErrNoToken
	}
	c := &Client{
		base:     strings.TrimRight(o.GatewayURL, "/") + "/proliferate/" + url.PathEscape(o.SessionID) + "/actions",
		token:    o.Token,
		hc:       o.HTTPClient,
		timeout:  o.Timeout,
		interval: o.PollInterval,
		now:      o.Now,
	}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.interval <= 0 {
		c.interval = DefaultPollInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c, nil
}

// Error is a gateway answer the command fails with.
type Error struct {
	// Status is the HTTP status, 0 when the failure is an invocation's outcome.
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// do sends one request and returns the status and body.
func (c *Client) do(ctx context.Context, method, path string, in any) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, nil, fmt.Errorf("build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("read %s %s: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// simple is do for plain calls: ≥400 is an *Error with the gateway's
// error-body rule ("error", else "message", else "HTTP <status>").
func (c *Client) simple(ctx context.Context, method, path string, in any) (json.RawMessage, error) {
	status, body, err := c.do(ctx, method, path, in)
	if err != nil {
		return nil, err
	}
	if status >= 400 {
		return nil, &Error{Status: status, Message: sidecar.ErrorMessage(status, body, true)}
	}
	return body, nil
}

// Available calls GET {gw}/available.
func (c *Client) Available(ctx context.Context) (json.RawMessage, error) {
	return c.simple(ctx, http.MethodGet, "/available", nil)
}

// Guide calls GET {gw}/guide/{integration}.
func (c *Client) Guide(ctx context.Context, integration string) (json.RawMessage, error) {
	return c.simple(ctx, http.MethodGet, "/guide/"+url.PathEscape(integration), nil)
}

// ListGrants calls GET {gw}/grants.
func (c *Client) ListGrants(ctx context.Context) (json.RawMessage, error) {
	return c.simple(ctx, http.MethodGet, "/grants", nil)
}

// GrantRequest is the body of POST {gw}/grants.
type GrantRequest struct {
	Integration string `json:"integration"`
	Action      string `json:"action"`
	Scope       string `json:"scope"`
	MaxCalls    *int   `json:"maxCalls,omitempty"`
}

// Scopes a grant can have.
const (
	ScopeSession = "session"
	ScopeOrg     = "org"
)

// ValidationError is a bad grant argument; the CLI exits 2 with its message.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

// NewGrantRequest checks scope (empty means session) and maxCalls (empty means
// none) and builds the request.
func NewGrantRequest(integration, action, scope, maxCalls string) (GrantRequest, error) {
	if scope == "" {
		scope = ScopeSession
	}
	if scope != ScopeSession && scope != ScopeOrg {
		return GrantRequest{}, &ValidationError{Msg: "--scope must be 'session' or 'org'"}
	}
	r := GrantRequest{Integration: integration, Action: action, Scope: scope}
	if maxCalls != "" {
		n, err := strconv.Atoi(maxCalls)
		if err != nil || n <= 0 {
			return GrantRequest{}, &ValidationError{Msg: "--max-calls must be a positive integer"}
		}
		r.MaxCalls = &n
	}
	return r, nil
}

// RequestGrant calls POST {gw}/grants.
func (c *Client) RequestGrant(ctx context.Context, r GrantRequest) (json.RawMessage, error) {
	return c.simple(ctx, http.MethodPost, "/grants", r)
}

// invokeRequest is the body of POST {gw}/invoke.
type invokeRequest struct {
	Integration string          `json:"integration"`
	Action      string          `json:"action"`
	Params      json.RawMessage `json:"params"`
}

// invocation is the part of an invoke or poll answer Run looks at. The gateway
// nests it under "invocation"; a flat answer is read the same way.
type invocation struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Result json.RawMessage `json:"result"`
	Error  any             `json:"error"`
}

type envelope struct {
	invocation
	Invocation *invocation `json:"invocation"`
}

// Invocation outcomes that end the wait.
const (
	StatusCompleted = "completed"
	StatusDenied    = "denied"
	StatusFailed    = "failed"
	StatusExpired   = "expired"
)

// Waiter hears about an invocation that waits for approval: Start once with
// its id, then Tick after every poll that found it still pending.
type Waiter interface {
	Start(id string)
	Tick(elapsed time.Duration)
}

// Run invokes an action and returns what the command prints: the result of a
// 200 or of a completed invocation, or the body of any other success. A 202
// with an invocation id is polled every PollInterval until it ends or ctx is
// done (then ctx.Err() is returned, wrapped with the invocation id).
// params nil means {}.
func (c *Client) Run(ctx context.Context, integration, action string, params json.RawMessage, w Waiter) (json.RawMessage, error) {
	if params == nil {
		params = json.RawMessage("{}")
	}
	status, body, err := c.do(ctx, http.MethodPost, "/invoke", invokeRequest{Integration: integration, Action: action, Params: params})
	if err != nil {
		return nil, err
	}
	switch {
	case status == http.StatusForbidden:
		// A denial says its "error", else "Action denied"; "message" is not read here.
		var b struct {
			Error any `json:"error"`
		}
		msg := "Action denied"
		if json.Unmarshal(body, &b) == nil {
			if s, ok := b.Error.(string); ok && s != "" {
				msg = s
			}
		}
		return nil, &Error{Status: status, Message: msg}
	case status >= 400:
		return nil, &Error{Status: status, Message: sidecar.ErrorMessage(status, body, true)}
	}
	var env envelope
	_ = json.Unmarshal(body, &env)
	if status == http.StatusOK && len(env.invocation.Result) > 0 {
		return env.invocation.Result, nil
	}
	inv := env.Invocation
	if status != http.StatusAccepted || inv == nil || inv.ID == "" {
		return body, nil
	}
	if w != nil {
		w.Start(inv.ID)
	}
	return c.poll(ctx, inv.ID, w)
}

// poll asks for the invocation's state until it ends.
func (c *Client) poll(ctx context.Context, id string, w Waiter) (json.RawMessage, error) {
	start := c.now()
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for approval of invocation %s: %w", id, ctx.Err())
		case <-t.C:
		}
		status, body, err := c.do(ctx, http.MethodGet, "/invocations/"+url.PathEscape(id), nil)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("wait for approval of invocation %s: %w", id, ctx.Err())
			}
			return nil, err
		}
		if status >= 400 {
			return nil, &Error{Status: status, Message: sidecar.ErrorMessage(status, body, true)}
		}
		var env envelope
		if err := json.Unmarshal(body, &env); err != nil {
			return nil, fmt.Errorf("decode invocation %s: %w", id, err)
		}
		inv := env.invocation
		if env.Invocation != nil {
			inv = *env.Invocation
		}
		switch inv.Status {
		case StatusCompleted:
			if len(inv.Result) == 0 {
				return json.RawMessage("null"), nil
			}
			return inv.Result, nil
		case StatusDenied, StatusFailed, StatusExpired:
			// The contract's "Action <status>: <error>", colon included when the gateway gives no error.
			return nil, &Error{Message: "Action " + inv.Status + ": " + errText(inv.Error)}
		}
		if w != nil {
			w.Tick(c.now().Sub(start))
		}
	}
}

// errText renders an invocation's error, which gateways send as a string or an object.
func errText(v any) string {
	switch e := v.(type) {
	case nil:
		return ""
	case string:
		return e
	case map[string]any:
		if m, ok := e["message"].(string); ok {
			return m
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}
