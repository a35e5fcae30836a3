package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
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

	// MaxBodyBytes bounds request bodies; default 1 MiB.
	MaxBodyBytes int64
	// Version is reported by GET /api/health; empty leaves it out.
	Version string
}

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
}

// New builds a Server from opts.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		return nil, errors.New("api: Logger is required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	s := &Server{opts: opts, log: opts.Logger.With("component", "api"), done: make(chan struct{})}
	s.handler = s.routes()
	return s, nil
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
