// Package sidecar is the typed Go client of the sandbox-mcp HTTP API. The
// proliferate CLI, the MCP mode and host-side code use it, so retries, timeouts
// and the error-body rule live in one place.
package sidecar

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
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// Defaults of the wire contract.
const (
	DefaultRetries    = 10
	DefaultRetryDelay = time.Second
	DefaultTimeout    = 30 * time.Second
)

// Options configures a Client.
type Options struct {
	// BaseURL is the sidecar's address, e.g. http://127.0.0.1:4000. Required.
	BaseURL string
	// Token is sent as "Authorization: Bearer <token>" when not empty.
	Token string
	// HTTPClient is used for every request; nil means a client of its own.
	HTTPClient *http.Client
	// Retries is how often a refused connection is retried; 0 means
	// DefaultRetries, a negative value means never.
	Retries int
	// RetryDelay is the pause between retries; 0 means DefaultRetryDelay.
	RetryDelay time.Duration
	// Timeout bounds each non-streaming request; 0 means DefaultTimeout.
	// Streams (Logs, Events) are bounded only by their context.
	Timeout time.Duration
	// OnRetry, when set, is called before each wait for a retry of a refused
	// connection, with the error and the retry's number (1 for the first); the
	// CLI tells the user once that it is waiting for the sidecar.
	OnRetry func(err error, retry int)
}

// Client calls the sidecar API. It is safe for concurrent use.
type Client struct {
	base       *url.URL
	token      string
	hc         *http.Client
	retries    int
	retryDelay time.Duration
	timeout    time.Duration
	onRetry    func(error, int)
}

// New returns a Client for o, or an error when o.BaseURL is not an http(s) URL.
func New(o Options) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(o.BaseURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("parse sidecar url %q: %w", o.BaseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("sidecar url %q: want http://host:port", o.BaseURL)
	}
	c := &Client{base: u, token: o.Token, hc: o.HTTPClient, retries: o.Retries, retryDelay: o.RetryDelay, timeout: o.Timeout, onRetry: o.OnRetry}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	switch {
	case c.retries == 0:
		c.retries = DefaultRetries
	case c.retries < 0:
		c.retries = 0
	}
	if c.retryDelay <= 0 {
		c.retryDelay = DefaultRetryDelay
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	return c, nil
}

// APIError is an answer with a status of 400 or more.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Message is the body's "error" field, else "HTTP <status>".
	Message string
	// Body is the raw response body.
	Body []byte
}

func (e *APIError) Error() string { return e.Message }

// JSON reports whether the body was a JSON object with a string "error" field,
// which tells a sidecar's own answer from a proxy's or an old server's page.
func (e *APIError) JSON() bool {
	var b struct {
		Error *string `json:"error"`
	}
	return json.Unmarshal(e.Body, &b) == nil && b.Error != nil
}

// ErrorMessage applies the contract's error-body rule to body: its "error"
// string, else its "message" string when message is true, else "HTTP <status>".
func ErrorMessage(status int, body []byte, message bool) string {
	var b struct {
		Error   any `json:"error"`
		Message any `json:"message"`
	}
	if json.Unmarshal(body, &b) == nil {
		if s, ok := b.Error.(string); ok && s != "" {
			return s
		}
		if s, ok := b.Message.(string); ok && s != "" && message {
			return s
		}
	}
	return "HTTP " + strconv.Itoa(status)
}

// Do sends a request with an optional JSON body and returns the response body
// of a 2xx answer, retrying refused connections. Any other status is an *APIError.
func (c *Client) Do(ctx context.Context, method, path string, in any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.send(ctx, method, path, in)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		return nil, newAPIError(resp.StatusCode, body)
	}
	return body, nil
}

// call is Do that decodes the answer into out.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	body, err := c.Do(ctx, method, path, in)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

// send performs the request, retrying while the connection is refused. The
// caller closes the response body.
func (c *Client) send(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var payload []byte
	contentType := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		payload, contentType = b, "application/json"
	}
	for attempt := 0; ; attempt++ {
		req, err := c.newRequest(ctx, method, path, contentType, bytes.NewReader(payload))
		if err != nil {
			return nil, err
		}
		resp, err := c.hc.Do(req)
		if err == nil {
			return resp, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || attempt >= c.retries {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%s %s: %w", method, path, unwrapURL(err))
		}
		if c.onRetry != nil {
			c.onRetry(err, attempt+1)
		}
		t := time.NewTimer(c.retryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// newRequest builds a request to path with the token and, when contentType
// is not empty, that Content-Type.
func (c *Client) newRequest(ctx context.Context, method, path, contentType string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// newAPIError is the *APIError of an answer with status ≥ 400 and body.
func newAPIError(status int, body []byte) *APIError {
	return &APIError{Status: status, Message: ErrorMessage(status, body, false), Body: body}
}

// readAPIError reads (at most 1 MiB of) a failed answer's body, closes it
// and returns its *APIError; for answers whose success body is a stream.
func readAPIError(resp *http.Response) *APIError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return newAPIError(resp.StatusCode, b)
}

// unwrapURL drops *url.Error's repetition of method and URL.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// Health calls GET /api/health.
func (c *Client) Health(ctx context.Context) (apitype.StatusResponse, error) {
	var out apitype.StatusResponse
	err := c.call(ctx, http.MethodGet, "/api/health", nil, &out)
	return out, err
}

// AuthCheck calls GET /api/auth/check; a wrong token is an *APIError with Status 401.
func (c *Client) AuthCheck(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/api/auth/check", nil, nil)
}

// ListServices calls GET /api/services.
func (c *Client) ListServices(ctx context.Context) (apitype.ServicesResponse, error) {
	var out apitype.ServicesResponse
	err := c.call(ctx, http.MethodGet, ServicesPath, nil, &out)
	return out, err
}

// GetService calls GET /api/services/{name}.
func (c *Client) GetService(ctx context.Context, name string) (apitype.ServiceInfo, error) {
	var out apitype.ServiceResponse
	err := c.call(ctx, http.MethodGet, ServicePath(name), nil, &out)
	return out.Service, err
}

// StartService calls POST /api/services.
func (c *Client) StartService(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	var out apitype.ServiceResponse
	err := c.call(ctx, http.MethodPost, ServicesPath, req, &out)
	return out.Service, err
}

// StopService calls DELETE /api/services/{name}.
func (c *Client) StopService(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, ServicePath(name), nil, nil)
}

// RestartService calls POST /api/services/{name}/restart.
func (c *Client) RestartService(ctx context.Context, name string) (apitype.ServiceInfo, error) {
	var out apitype.ServiceResponse
	err := c.call(ctx, http.MethodPost, RestartPath(name), nil, &out)
	return out.Service, err
}

// Expose calls POST /api/expose. A 502 (port recorded, Caddy not routing) is an
// *APIError whose Body still carries exposedPort.
func (c *Client) Expose(ctx context.Context, port int) (apitype.ExposeResponse, error) {
	var out apitype.ExposeResponse
	err := c.call(ctx, http.MethodPost, ExposePath, map[string]int{"port": port}, &out)
	return out, err
}

// ExposeStatus calls GET /api/expose: where the preview site goes now.
func (c *Client) ExposeStatus(ctx context.Context) (apitype.ExposeStatus, error) {
	var out apitype.ExposeStatus
	err := c.call(ctx, http.MethodGet, ExposePath, nil, &out)
	return out, err
}

// LogTail calls GET /api/logs/{name}?tail=n.
func (c *Client) LogTail(ctx context.Context, name string, n int) ([]string, error) {
	var out apitype.LogLinesResponse
	err := c.call(ctx, http.MethodGet, LogTailPath(name, n), nil, &out)
	return out.Lines, err
}

// GitRepos calls GET /api/git/repos.
func (c *Client) GitRepos(ctx context.Context) ([]apitype.GitRepo, error) {
	var out apitype.GitReposResponse
	err := c.call(ctx, http.MethodGet, "/api/git/repos", nil, &out)
	return out.Repos, err
}

// GitStatus calls GET /api/git/status?repo=id.
func (c *Client) GitStatus(ctx context.Context, repoID string) (apitype.GitStatusResponse, error) {
	var out apitype.GitStatusResponse
	err := c.call(ctx, http.MethodGet, "/api/git/status?"+url.Values{"repo": {repoID}}.Encode(), nil, &out)
	return out, err
}

// GitDiff calls GET /api/git/diff?repo=id[&path=p].
func (c *Client) GitDiff(ctx context.Context, repoID, path string) (string, error) {
	q := url.Values{"repo": {repoID}}
	if path != "" {
		q.Set("path", path)
	}
	var out apitype.GitDiffResponse
	err := c.call(ctx, http.MethodGet, "/api/git/diff?"+q.Encode(), nil, &out)
	return out.Diff, err
}

// URL paths of the API, for callers that send a request with Do (or open a
// stream) themselves, as the CLI does to print answers as they came.
const (
	ServicesPath = "/api/services"
	ExposePath   = "/api/expose"
	EventsPath   = "/api/events"
)

// ServicePath is the URL path of one service.
func ServicePath(name string) string { return ServicesPath + "/" + url.PathEscape(name) }

// RestartPath is the URL path that restarts one service.
func RestartPath(name string) string { return ServicePath(name) + "/restart" }

// LogsPath is the URL path of one service's log (an SSE stream).
func LogsPath(name string) string { return "/api/logs/" + url.PathEscape(name) }

// LogTailPath is the URL path of the last n lines of one service's log.
func LogTailPath(name string, n int) string { return LogsPath(name) + "?tail=" + strconv.Itoa(n) }
