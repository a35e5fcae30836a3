package api

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Options configures the API. Only Logger is required; a feature whose
// dependency is nil answers 501.
type Options struct {
	// Token is the bearer token; empty means every protected route answers 401.
	Token  string
	Logger *slog.Logger

	Services Services
	Logs     LogStreamer
	Events   EventSource
	Expose   Exposer
	Git      Git
	Ports    Ports
	Terminal Terminal

	// MaxBodyBytes bounds request bodies; default 1 MiB. A route may raise
	// it for itself (allowBody).
	MaxBodyBytes int64
	// Version is reported by GET /api/health; empty leaves it out.
	Version string
	// MaxConns caps open HTTP connections (HTTPServer); default half of
	// RLIMIT_NOFILE, clamped to 32..4096, read at every accept.
	MaxConns int
	// ReadTimeout bounds reading one whole request (HTTPServer); default
	// DefaultReadTimeout.
	ReadTimeout time.Duration
}

// Timeouts of the HTTP server (HTTPServer).
const (
	// ReadHeaderTimeout bounds the wait for a request's headers.
	ReadHeaderTimeout = rules.RequestHeaderTimeout
	// DefaultReadTimeout bounds reading a whole request, body included.
	// Streaming routes lift it once authenticated (liftReadDeadline).
	DefaultReadTimeout = rules.RequestReadTimeout
	// IdleTimeout closes keep-alive connections left idle longer than any
	// client pool keeps them (an idle connection holds ~22 KiB; Go's
	// default is 90 s).
	IdleTimeout = rules.IdleConnTimeout
)

// Server is the sidecar's HTTP handler.
type Server struct {
	opts    Options
	log     *slog.Logger
	handler http.Handler
	// done is closed when the server shuts down; streaming handlers end on it.
	done      chan struct{}
	closeOnce sync.Once
	// listCache is the last GET /api/services body, when Services is a listVersioner.
	listCache atomic.Pointer[encodedList]
	// conns is the listener of HTTPServer, for /api/debug/stats.
	conns atomic.Pointer[connLimiter]
	// streams counts open SSE streams and terminal connections.
	streams atomic.Int64
	// bundleSlots holds one token per POST /api/git/bundle being read.
	bundleSlots chan struct{}
}

// New builds a Server from opts.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		return nil, errors.New("api: Logger is required")
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = rules.MaxRequestBodyBytes
	}
	s := &Server{opts: opts, log: opts.Logger.With("component", "api"), done: make(chan struct{}),
		bundleSlots: make(chan struct{}, rules.MaxBundleUploads)}
	s.handler = s.routes()
	return s, nil
}

// HTTPServer returns the http.Server for s and ln wrapped in the connection
// limiter; serve with hs.Serve(ln). The server bounds reading every request
// (ReadHeaderTimeout, ReadTimeout) and the number of open connections
// (Options.MaxConns), so clients that hold connections without a token can
// neither keep a request open for long nor take the descriptors that
// authenticated clients, health checks and services need.
func (s *Server) HTTPServer(ln net.Listener, errorLog *log.Logger) (*http.Server, net.Listener) {
	limit := connLimit
	if s.opts.MaxConns > 0 {
		limit = func() int { return s.opts.MaxConns }
	}
	cl := newConnLimiter(ln, limit, s.log)
	s.conns.Store(cl)
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          errorLog,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if lc, ok := c.(*limitedConn); ok {
				return context.WithValue(ctx, limitedConnKey{}, lc)
			}
			return ctx
		},
		ConnState: func(c net.Conn, st http.ConnState) {
			if lc, ok := c.(*limitedConn); ok {
				lc.state.Store(int32(st))
			}
		},
	}
	hs.RegisterOnShutdown(s.Close)
	return hs, cl
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Close ends every open stream (SSE); call it when http.Server.Shutdown starts
// (RegisterOnShutdown) so Shutdown does not wait for streams that never end.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.done) })
}

// streamContext returns a context that ends with the request or with the server.
func (s *Server) streamContext(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
