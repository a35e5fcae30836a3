// Package hrana is a small client of libSQL's "Hrana over HTTP" protocol (sqld's HTTP
// API v2: POST /v2/pipeline with JSON execute, batch and close requests on a stream
// named by a baton), and a database/sql driver on top of it, so provider/docsearch runs
// the same SQL on a libSQL server or Turso as on its embedded SQLite file.
//
// It is our own code on net/http. A pure-Go client exists (Turso's
// libsql-client-go, a database/sql driver over Hrana, since deprecated in favour of
// the cgo-based go-libsql), but it is not among the project's dependencies, and the
// part of Hrana used here, the HTTP pipeline, is small enough to keep in view. A
// statement outside a transaction is one request on a fresh stream (execute, then
// close), so no stream can expire between calls; a transaction holds one stream from
// BEGIN to COMMIT or ROLLBACK. Responses are bounded in size and time, every field of
// a response is checked before use, and the auth token goes only into the
// Authorization header of requests to the configured host: it is in no error message.
package hrana

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"
)

// Defaults of Options.
const (
	DefaultTimeout          = 30 * time.Second
	DefaultMaxResponseBytes = 64 << 20
)

// Options configure a Client.
type Options struct {
	// URL is the database: libsql://host[:port][/path] (which is https), or an
	// https:// or http:// URL of the same. No user info, query or fragment: the token
	// comes from Token. Required.
	URL string
	// Token, when set, is sent as a bearer token (a Turso database token or an sqld
	// JWT). It is never part of an error or log line.
	Token string
	// HTTPClient sends the requests; nil means a client of its own, whose idle
	// connections Close closes.
	HTTPClient *http.Client
	// Timeout bounds one HTTP request (default DefaultTimeout).
	Timeout time.Duration
	// MaxResponseBytes bounds one response body (default DefaultMaxResponseBytes).
	MaxResponseBytes int64
}

// Client talks to one libSQL database. It is safe for concurrent use.
type Client struct {
	base    *url.URL
	token   string
	http    *http.Client
	timeout time.Duration
	max     int64
	own     *http.Transport // the transport of a client of its own
}

// ErrUnauthorized is wrapped by errors of requests the server refused with HTTP 401 or
// 403: a missing, wrong or expired token.
var ErrUnauthorized = errors.New("the server refused the auth token")

// HTTPError is a pipeline request answered with an HTTP error status; the stream it
// was on is gone.
type HTTPError struct {
	StatusCode int
	// Message is the server's error message, or the start of its body.
	Message string
}

func (e *HTTPError) Error() string {
	s := fmt.Sprintf("libsql: HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Unwrap makes 401 and 403 match ErrUnauthorized.
func (e *HTTPError) Unwrap() error {
	if e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden {
		return ErrUnauthorized
	}
	return nil
}

// ParseURL checks a database URL and returns the HTTP(S) base URL it names. Its
// errors show the URL's scheme and host only: a URL given with a token in it must not
// print the token.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("libsql url: not a URL")
	}
	switch {
	case u.User != nil:
		return nil, errors.New("libsql url: user info is not allowed (the token comes from its own setting)")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, errors.New("libsql url: a query or fragment is not allowed (the token comes from its own setting)")
	}
	switch u.Scheme {
	case "libsql":
		u.Scheme = "https"
	case "https", "http":
	default:
		return nil, fmt.Errorf("libsql url: scheme %q: want libsql://, https:// or http://", truncate(u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.New("libsql url: no host")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// New checks o and returns a Client; it sends nothing.
func New(o Options) (*Client, error) {
	u, err := ParseURL(o.URL)
	if err != nil {
		return nil, err
	}
	if strings.ContainsFunc(o.Token, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) {
		return nil, errors.New("libsql: the auth token contains spaces or control characters")
	}
	c := &Client{base: u, token: o.Token, http: o.HTTPClient, timeout: o.Timeout, max: o.MaxResponseBytes}
	if c.http == nil {
		c.own = http.DefaultTransport.(*http.Transport).Clone()
		c.http = &http.Client{Transport: c.own}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.max <= 0 {
		c.max = DefaultMaxResponseBytes
	}
	return c, nil
}

// Close closes the idle connections of a client of its own (Options.HTTPClient nil).
// Streams of open transactions are the server's to expire.
func (c *Client) Close() {
	if c.own != nil {
		c.own.CloseIdleConnections()
	}
}

// Stmt is one SQL statement with positional arguments (nil, int64, int, bool,
// float64, string, []byte or time.Time) and named ones (names with their prefix, e.g.
// ":id").
type Stmt struct {
	SQL   string
	Args  []any
	Named map[string]any
}

func (s Stmt) wire() (wireStmt, error) {
	w := wireStmt{SQL: s.SQL, WantRows: true}
	for i, a := range s.Args {
		v, err := encodeValue(a)
		if err != nil {
			return wireStmt{}, fmt.Errorf("argument %d: %w", i+1, err)
		}
		w.Args = append(w.Args, v)
	}
	for name, a := range s.Named {
		v, err := encodeValue(a)
		if err != nil {
			return wireStmt{}, fmt.Errorf("argument %s: %w", name, err)
		}
		w.NamedArgs = append(w.NamedArgs, wireNamedArg{Name: name, Value: v})
	}
	return w, nil
}

// Execute runs one statement on a fresh stream.
func (c *Client) Execute(ctx context.Context, s Stmt) (Result, error) {
	st := c.Stream()
	res, err := st.do(ctx, true, s)
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// Batch runs statements in order on a fresh stream, each only if the ones before it
// succeeded, in one round trip; the error names the first failed step.
func (c *Client) Batch(ctx context.Context, stmts []Stmt) ([]Result, error) {
	b := &wireBatch{}
	for i, s := range stmts {
		w, err := s.wire()
		if err != nil {
			return nil, fmt.Errorf("batch step %d: %w", i, err)
		}
		step := wireStep{Stmt: w}
		if i > 0 {
			step.Condition = &wireCond{Type: "ok", Step: i - 1}
		}
		b.Steps = append(b.Steps, step)
	}
	st := c.Stream()
	results, errs, err := st.pipeline(ctx, []streamRequest{{Type: "batch", Batch: b}, {Type: "close"}})
	if err != nil {
		return nil, err
	}
	if errs[0] != nil {
		return nil, errs[0]
	}
	return results[0], nil
}

// Stream is a server-side connection: statements on it share transactions and
// connection state. It is not safe for concurrent use.
type Stream struct {
	c      *Client
	baton  *string
	url    string // where its next request goes
	opened bool   // a request was sent
	closed bool
}

// Stream returns a new stream; the server opens it on its first request.
func (c *Client) Stream() *Stream {
	return &Stream{c: c, url: c.base.String()}
}

// Execute runs a statement on the stream.
func (s *Stream) Execute(ctx context.Context, st Stmt) (Result, error) {
	res, err := s.do(ctx, false, st)
	if err != nil {
		return Result{}, err
	}
	return res[0], nil
}

// Close closes the stream (a no-op for a stream that never sent a request or is
// closed).
func (s *Stream) Close(ctx context.Context) error {
	if !s.opened || s.closed {
		s.closed = true
		return nil
	}
	_, errs, err := s.pipeline(ctx, []streamRequest{{Type: "close"}})
	s.closed = true
	if err != nil {
		return err
	}
	return errs[0]
}

// do executes st, then closes the stream when closeAfter is set.
func (s *Stream) do(ctx context.Context, closeAfter bool, st Stmt) ([]Result, error) {
	w, err := st.wire()
	if err != nil {
		return nil, err
	}
	reqs := []streamRequest{{Type: "execute", Stmt: &w}}
	if closeAfter {
		reqs = append(reqs, streamRequest{Type: "close"})
	}
	results, errs, err := s.pipeline(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if errs[0] != nil {
		return nil, errs[0]
	}
	return results[0], nil
}

// pipeline sends requests on the stream and decodes the answer; an error return means
// the stream is unusable (HTTP, protocol or decoding failure), while errs holds each
// request's own error (an SQL error leaves the stream usable).
func (s *Stream) pipeline(ctx context.Context, reqs []streamRequest) ([][]Result, []error, error) {
	if s.closed {
		return nil, nil, errors.New("libsql: the stream is closed")
	}
	body, err := json.Marshal(pipelineReq{Baton: s.baton, Requests: reqs})
	if err != nil {
		return nil, nil, fmt.Errorf("libsql: encode request: %w", err)
	}
	s.opened = true
	raw, err := s.c.post(ctx, s.url, body)
	if err != nil {
		s.closed = true
		return nil, nil, err
	}
	resp, results, errs, err := decodeResponse(raw, reqs)
	if err != nil {
		s.closed = true
		return nil, nil, fmt.Errorf("libsql: %w", err)
	}
	s.baton = resp.Baton
	if resp.Baton == nil {
		s.closed = true
	}
	if resp.BaseURL != nil {
		next, err := s.c.sameServer(*resp.BaseURL)
		if err != nil {
			s.closed = true
			return nil, nil, err
		}
		s.url = next
	}
	return results, errs, nil
}

// sameServer accepts a base_url from the server only on the configured scheme and
// host, so the token is never sent elsewhere.
func (c *Client) sameServer(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != c.base.Scheme || u.Host != c.base.Host || u.User != nil {
		return "", fmt.Errorf("libsql: the server moved the stream to %q, not on %s://%s; refusing to send the token there",
			truncate(raw), c.base.Scheme, c.base.Host)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	return u.String(), nil
}

// post sends one pipeline request to base (a stream's base URL) and returns the body of
// a 2xx answer.
func (c *Client) post(ctx context.Context, base string, body []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/pipeline", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("libsql: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// *url.Error names the URL, which holds no secret (ParseURL refuses user info
		// and queries).
		return nil, fmt.Errorf("libsql: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &HTTPError{StatusCode: resp.StatusCode, Message: errorMessage(snippet)}
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.max+1))
	if err != nil {
		return nil, fmt.Errorf("libsql: read response: %w", err)
	}
	if int64(len(raw)) > c.max {
		return nil, fmt.Errorf("libsql: response over %d bytes", c.max)
	}
	return raw, nil
}

// errorMessage is the message of an HTTP error body: a Hrana Error's message (or a
// {"error": "..."} one's), else the body's start as printable text.
func errorMessage(b []byte) string {
	var e struct {
		Message string `json:"message"`
		Error   any    `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		if e.Message != "" {
			return printable(e.Message)
		}
		if s, ok := e.Error.(string); ok && s != "" {
			return printable(s)
		}
	}
	return printable(string(b))
}

// printable keeps at most 200 bytes of s, spaces for control characters.
func printable(s string) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		cut := 200
		for cut > 0 && !utf8RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
