// Package e2b is a client of E2B (e2b.dev), written from E2B's public OpenAPI spec of
// the control plane and the envd protocol spec of the in-sandbox API, and the
// provider.SandboxProvider built on it.
//
// Client speaks the control plane (create, get, list, kill, pause, connect, timeout,
// snapshots) with the X-API-Key header. Envd speaks one sandbox's envd: process
// start with streamed output, signals and stdin in the Connect protocol with JSON,
// the filesystem service, and file upload and download through /files. Provider
// boots a sandbox by running the shared boot plan (provider.BuildPlan) through envd.
//
// The subpackage e2bserver serves the same protocols on top of a provider/engine
// Engine, so all of this runs end to end on one machine without an account; the
// wire types both sides share are in e2bwire.
package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// Environment variables the client reads (the same names the official SDKs read).
const (
	EnvAPIKey     = provider.EnvE2BAPIKey
	EnvDomain     = provider.EnvE2BDomain
	EnvAPIURL     = provider.EnvE2BAPIURL
	EnvSandboxURL = provider.EnvE2BSandboxURL
	EnvTemplate   = provider.EnvE2BTemplate
)

// DefaultDomain is E2B's cloud.
const DefaultDomain = "e2b.app"

// maxBody bounds the control plane's response bodies.
const maxBody = 8 << 20

// IsNotFound reports whether err is a 404 from the control plane or envd.
func IsNotFound(err error) bool {
	var ae *e2bwire.APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusNotFound
	}
	var ce *e2bwire.ConnectError
	return errors.As(err, &ce) && ce.Code == e2bwire.CodeNotFound
}

// IsConflict reports whether err is a 409 (pause of a paused sandbox).
func IsConflict(err error) bool {
	var ae *e2bwire.APIError
	return errors.As(err, &ae) && ae.Status == http.StatusConflict
}

// ClientOptions configure a Client.
type ClientOptions struct {
	// APIKey is sent as X-API-Key; required.
	APIKey string
	// Domain is the sandbox domain; empty means DefaultDomain.
	Domain string
	// APIURL is the control plane's base URL; empty means https://api.<Domain>.
	APIURL string
	// SandboxURL, when set, is where every sandbox's envd is reached (a proxy or a
	// local server routing by the E2b-Sandbox-Id header); empty means
	// https://49983-<id>.<domain>.
	SandboxURL string
	// HTTPClient is used for every call; nil means a client without a global timeout
	// (process streams last as long as the process).
	HTTPClient *http.Client
}

// ClientOptionsFromEnv reads E2B_API_KEY, E2B_DOMAIN, E2B_API_URL and E2B_SANDBOX_URL.
func ClientOptionsFromEnv(getenv func(string) string) ClientOptions {
	return ClientOptions{
		APIKey:     strings.TrimSpace(getenv(EnvAPIKey)),
		Domain:     strings.TrimSpace(getenv(EnvDomain)),
		APIURL:     strings.TrimSpace(getenv(EnvAPIURL)),
		SandboxURL: strings.TrimSpace(getenv(EnvSandboxURL)),
	}
}

// Client is an E2B control-plane client. It is safe for concurrent use.
type Client struct {
	o   ClientOptions
	api *url.URL
}

// NewClient checks the options and returns a Client.
func NewClient(o ClientOptions) (*Client, error) {
	if o.APIKey == "" {
		return nil, errors.New("E2B_API_KEY is required")
	}
	if o.Domain == "" {
		o.Domain = DefaultDomain
	}
	if o.APIURL == "" {
		o.APIURL = "https://api." + o.Domain
	}
	u, err := url.Parse(strings.TrimRight(o.APIURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("E2B_API_URL %q is not an http(s) URL", o.APIURL)
	}
	if o.SandboxURL != "" {
		s, err := url.Parse(o.SandboxURL)
		if err != nil || (s.Scheme != "http" && s.Scheme != "https") || s.Host == "" {
			return nil, fmt.Errorf("E2B_SANDBOX_URL %q is not an http(s) URL", o.SandboxURL)
		}
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	return &Client{o: o, api: u}, nil
}

// Domain is the sandbox domain.
func (c *Client) Domain() string { return c.o.Domain }

// APIURL is the control plane's base URL.
func (c *Client) APIURL() string { return c.api.String() }

// do sends a JSON request and decodes a 2xx JSON answer into out (nil: ignored). Any
// other status is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (*http.Response, error) {
	u := *c.api
	u.Path += path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-Key", c.o.APIKey)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.o.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return resp, fmt.Errorf("%s %s: read response: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, DecodeAPIError(resp.StatusCode, raw)
	}
	if out != nil && len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp, fmt.Errorf("%s %s: decode response: %w", method, path, err)
		}
	}
	return resp, nil
}

// DecodeAPIError builds the error of a non-2xx control-plane answer.
func DecodeAPIError(status int, body []byte) *e2bwire.APIError {
	e := &e2bwire.APIError{Status: status}
	if json.Unmarshal(body, e) != nil || e.Message == "" {
		e.Message = ""
		e.Body = string(bytes.TrimSpace(body))
		if len(e.Body) > 500 {
			e.Body = e.Body[:500]
		}
	}
	return e
}

// Create creates a sandbox from a template (or a snapshot id, which E2B accepts as a
// template).
func (c *Client) Create(ctx context.Context, ns e2bwire.NewSandbox) (e2bwire.Sandbox, error) {
	var s e2bwire.Sandbox
	_, err := c.do(ctx, http.MethodPost, "/sandboxes", nil, ns, &s)
	if err == nil && s.SandboxID == "" {
		err = errors.New("create sandbox: answer has no sandboxID")
	}
	return s, err
}

// Get returns a sandbox's details. It never resumes a paused sandbox.
func (c *Client) Get(ctx context.Context, id string) (e2bwire.SandboxDetail, error) {
	var d e2bwire.SandboxDetail
	_, err := c.do(ctx, http.MethodGet, "/sandboxes/"+url.PathEscape(id), nil, nil, &d)
	return d, err
}

// ListOptions filter List.
type ListOptions struct {
	// States are the states to list; empty means running and paused.
	States []string
	// Metadata filters on metadata key=value pairs.
	Metadata map[string]string
	// Limit is the page size (1..100); zero means 100.
	Limit int
}

// List returns every sandbox matching o, following the v2 pagination (X-Next-Token)
// to the end. It never resumes a paused sandbox.
func (c *Client) List(ctx context.Context, o ListOptions) ([]e2bwire.SandboxDetail, error) {
	q := url.Values{}
	if len(o.States) > 0 {
		q.Set("state", strings.Join(o.States, ","))
	}
	if len(o.Metadata) > 0 {
		m := url.Values{}
		for k, v := range o.Metadata {
			m.Set(k, v)
		}
		q.Set("metadata", m.Encode())
	}
	limit := o.Limit
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	q.Set("limit", strconv.Itoa(limit))
	return listAll[e2bwire.SandboxDetail](ctx, c, "/v2/sandboxes", q, "list sandboxes")
}

// maxPages bounds a paginated listing whose server keeps handing out new tokens.
const maxPages = 10000

// listAll GETs path page after page (X-Next-Token), up to maxPages pages;
// a token seen before ends the listing. On an error it returns the pages
// read so far with it.
func listAll[T any](ctx context.Context, c *Client, path string, q url.Values, what string) ([]T, error) {
	var all []T
	seen := map[string]bool{}
	for range maxPages {
		var items []T
		resp, err := c.do(ctx, http.MethodGet, path, q, nil, &items)
		if err != nil {
			return all, err
		}
		all = append(all, items...)
		next := resp.Header.Get("X-Next-Token")
		if next == "" || seen[next] {
			return all, nil
		}
		seen[next] = true
		q.Set("nextToken", next)
	}
	return all, fmt.Errorf("%s: pagination does not end after %d pages", what, maxPages)
}

// Kill ends a sandbox; a 404 is returned as an error (see IsNotFound).
func (c *Client) Kill(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/sandboxes/"+url.PathEscape(id), nil, nil, nil)
	return err
}

// Pause pauses a running sandbox; a paused one answers 409 (see IsConflict).
func (c *Client) Pause(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/pause", nil, struct{}{}, nil)
	return err
}

// Connect returns a running sandbox's connection details, resuming it when paused;
// timeout is the new lifetime (only ever extended).
func (c *Client) Connect(ctx context.Context, id string, timeout time.Duration) (e2bwire.Sandbox, error) {
	var s e2bwire.Sandbox
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/connect", nil,
		map[string]int{"timeout": seconds(timeout)}, &s)
	return s, err
}

// SetTimeout sets the sandbox to end timeout from now.
func (c *Client) SetTimeout(ctx context.Context, id string, timeout time.Duration) error {
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/timeout", nil,
		map[string]int{"timeout": seconds(timeout)}, nil)
	return err
}

// CreateSnapshot makes a persistent snapshot of the sandbox; its id can be used as a
// template.
func (c *Client) CreateSnapshot(ctx context.Context, id, name string) (e2bwire.SnapshotInfo, error) {
	body := map[string]string{}
	if name != "" {
		body["name"] = name
	}
	var s e2bwire.SnapshotInfo
	_, err := c.do(ctx, http.MethodPost, "/sandboxes/"+url.PathEscape(id)+"/snapshots", nil, body, &s)
	if err == nil && s.SnapshotID == "" {
		err = errors.New("create snapshot: answer has no snapshotID")
	}
	return s, err
}

// ListSnapshots lists the snapshots made from sandboxID (every snapshot when empty).
func (c *Client) ListSnapshots(ctx context.Context, sandboxID string) ([]e2bwire.SnapshotInfo, error) {
	q := url.Values{"limit": {"100"}}
	if sandboxID != "" {
		q.Set("sandboxID", sandboxID)
	}
	return listAll[e2bwire.SnapshotInfo](ctx, c, "/snapshots", q, "list snapshots")
}

// Envd returns the envd client of a sandbox from a create or connect answer.
func (c *Client) Envd(s e2bwire.Sandbox) *Envd {
	domain := s.Domain
	if domain == "" {
		domain = c.o.Domain
	}
	base := c.o.SandboxURL
	if base == "" {
		base = "https://" + Host(s.SandboxID, e2bwire.EnvdPort, domain)
	}
	return NewEnvd(EnvdOptions{BaseURL: base, SandboxID: s.SandboxID, AccessToken: s.EnvdAccessToken, HTTPClient: c.o.HTTPClient})
}

// Host is the public host of a port of a sandbox: <port>-<id>.<domain>.
func Host(sandboxID string, port int, domain string) string {
	return strconv.Itoa(port) + "-" + sandboxID + "." + domain
}

func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// Sandbox is e2bwire.Sandbox, the answer of create and connect; the alias keeps the
// client's callers (the boot) free of the wire package.
type Sandbox = e2bwire.Sandbox
