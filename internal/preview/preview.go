// Package preview is the sidecar's loopback preview proxy: Caddy's preview
// site points at it once, and it forwards HTTP and WebSocket traffic to the
// exposed port, so exposing another port never reloads Caddy and never drops a
// connection. cmd/sandbox-mcp starts it; it knows nothing of the API.
package preview

import (
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Upstream sources reported by Proxy.Upstream.
const (
	SourceExposed  = "exposed"
	SourceFallback = "fallback"
	SourceNone     = "none"
)

// Options configures a Proxy.
type Options struct {
	Logger *slog.Logger
	// Host is where upstream ports are dialled; default "localhost", which
	// reaches dev servers bound to 127.0.0.1 or ::1 alike.
	Host string
	// FallbackPorts are probed in order when no port is exposed; nil means
	// rules.FallbackPorts().
	FallbackPorts []int
	// ProbeTimeout bounds one fallback probe; default 200ms.
	ProbeTimeout time.Duration
	// ProbeTTL is how long a fallback probe result is reused; default 1s.
	ProbeTTL time.Duration
}

// Proxy is an http.Handler that reverse-proxies to the exposed port.
type Proxy struct {
	host         string
	fallback     []int
	probeTimeout time.Duration
	probeTTL     time.Duration
	log          *slog.Logger
	rp           *httputil.ReverseProxy
	transport    *http.Transport

	exposed atomic.Int64 // 0 when none

	probeMu   sync.Mutex
	probePort int
	probeAt   time.Time
}

type ctxKey struct{}

// target is the upstream chosen for one request.
type target struct {
	port   int
	source string
}

// New returns a Proxy with no exposed port.
func New(opts Options) (*Proxy, error) {
	if opts.Logger == nil {
		return nil, errors.New("preview: Logger is required")
	}
	if opts.Host == "" {
		opts.Host = "localhost"
	}
	if opts.FallbackPorts == nil {
		opts.FallbackPorts = rules.FallbackPorts()
	}
	for _, p := range opts.FallbackPorts {
		if p < 1 || p > 65535 {
			return nil, fmt.Errorf("preview: fallback port %d is not between 1 and 65535", p)
		}
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 200 * time.Millisecond
	}
	if opts.ProbeTTL <= 0 {
		opts.ProbeTTL = time.Second
	}
	p := &Proxy{
		host:         opts.Host,
		fallback:     opts.FallbackPorts,
		probeTimeout: opts.ProbeTimeout,
		probeTTL:     opts.ProbeTTL,
		log:          opts.Logger.With("component", "preview"),
	}
	p.transport = &http.Transport{
		Proxy:                 nil, // never route loopback traffic through HTTP_PROXY
		DialContext:           dialLoopback,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		Transport:      p.transport,
		ModifyResponse: stripFrameHeaders,
		ErrorHandler:   p.errorPage,
		BufferPool:     bufferPool{},
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	return p, nil
}

// SetPort makes port the upstream of every new request; 0 clears it, so the
// fallback ports apply. Open connections keep their upstream.
func (p *Proxy) SetPort(port int) {
	p.exposed.Store(int64(port))
}

// Upstream returns the port new requests go to and why: SourceExposed,
// SourceFallback, or SourceNone with port 0 when nothing is exposed and no
// fallback port accepts connections.
func (p *Proxy) Upstream(ctx context.Context) (port int, source string) {
	t := p.pick(ctx)
	return t.port, t.source
}

// Close drops idle upstream connections.
func (p *Proxy) Close() { p.transport.CloseIdleConnections() }

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := p.pick(r.Context())
	if t.port == 0 {
		p.writeError(w, t, nil)
		return
	}
	p.rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, t)))
}

func (p *Proxy) pick(ctx context.Context) target {
	if port := int(p.exposed.Load()); port != 0 {
		return target{port, SourceExposed}
	}
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	if !p.probeAt.IsZero() && time.Since(p.probeAt) < p.probeTTL {
		return fallbackTarget(p.probePort)
	}
	p.probePort = 0
	for _, port := range p.fallback {
		if p.accepts(ctx, port) {
			p.probePort = port
			break
		}
	}
	p.probeAt = time.Now()
	return fallbackTarget(p.probePort)
}

func fallbackTarget(port int) target {
	if port == 0 {
		return target{0, SourceNone}
	}
	return target{port, SourceFallback}
}

func (p *Proxy) accepts(ctx context.Context, port int) bool {
	ctx, cancel := context.WithTimeout(ctx, p.probeTimeout)
	defer cancel()
	c, err := dialLoopback(ctx, "tcp", p.hostport(port))
	if err != nil {
		return false
	}
	c.Close()
	return true
}

var dialer = &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}

// dialLoopback dials addr; "localhost" tries 127.0.0.1, then ::1, because dev
// servers bind either and /etc/hosts often maps localhost to one of them only.
func dialLoopback(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "localhost" {
		return dialer.DialContext(ctx, network, addr)
	}
	c, err4 := dialer.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", port))
	if err4 == nil {
		return c, nil
	}
	c, err6 := dialer.DialContext(ctx, "tcp6", net.JoinHostPort("::1", port))
	if err6 == nil {
		return c, nil
	}
	return nil, err4
}

func (p *Proxy) hostport(port int) string { return net.JoinHostPort(p.host, strconv.Itoa(port)) }

func (p *Proxy) rewrite(r *httputil.ProxyRequest) {
	t, _ := r.In.Context().Value(ctxKey{}).(target)
	r.SetURL(&url.URL{Scheme: "http", Host: p.hostport(t.port)})
	// The listener is loopback only: whatever set X-Forwarded-* (Caddy) is trusted.
	if v := r.In.Header["X-Forwarded-For"]; v != nil {
		r.Out.Header["X-Forwarded-For"] = v
	}
	r.SetXForwarded()
	for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto"} {
		if v := r.In.Header.Get(h); v != "" {
			r.Out.Header.Set(h, v)
		}
	}
}

// stripFrameHeaders lets the platform show the app in an iframe.
func stripFrameHeaders(resp *http.Response) error {
	resp.Header.Del("X-Frame-Options")
	resp.Header.Del("Content-Security-Policy")
	return nil
}

func (p *Proxy) errorPage(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(ctxKey{}).(target)
	if t.source == SourceFallback {
		// The cached probe was wrong: probe again on the next request.
		p.probeMu.Lock()
		p.probeAt = time.Time{}
		p.probeMu.Unlock()
	}
	if errors.Is(err, context.Canceled) {
		// The client went away; nobody reads the page.
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	p.log.Debug("upstream unreachable", "port", t.port, "err", err)
	p.writeError(w, t, err)
}

func (p *Proxy) writeError(w http.ResponseWriter, t target, err error) {
	var title, detail string
	switch t.source {
	case SourceExposed:
		title = fmt.Sprintf("Nothing is answering on port %d", t.port)
		detail = fmt.Sprintf("Port %d is exposed, but the preview could not reach an app on it. Start your app on port %d (listening on localhost), or expose the port it uses: proliferate services expose --port &lt;port&gt;", t.port, t.port)
	case SourceFallback:
		title = fmt.Sprintf("Nothing is answering on port %d", t.port)
		detail = fmt.Sprintf("No port is exposed and port %d stopped answering. Start your app, or expose its port: proliferate services expose --port &lt;port&gt;", t.port)
	default:
		title = "No app is running"
		detail = fmt.Sprintf("No port is exposed and nothing listens on %s. Start your app, then expose its port: proliferate services expose --port &lt;port&gt;", portList(p.fallback))
	}
	if err != nil {
		detail += "<br><small>" + html.EscapeString(err.Error()) + "</small>"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Retry-After", "2")
	w.WriteHeader(http.StatusBadGateway)
	fmt.Fprintf(w, errorHTML, html.EscapeString(title), html.EscapeString(title), detail)
}

func portList(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	if len(s) > 1 {
		return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
	}
	return strings.Join(s, "")
}

const errorHTML = `<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="3"><title>%s</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}</style>
</head><body><h1>%s</h1><p>%s</p><p>This page reloads by itself.</p></body></html>
`

// bufferPool reuses the copy buffers of proxied bodies.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func (bufferPool) Get() []byte  { return *buffers.Get().(*[]byte) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }
