// Package expose routes the sandbox's preview site to the exposed port: it runs
// the loopback preview proxy (internal/preview), keeps Caddy routing the preview
// site to it (internal/caddy), and owns the exposed port: it holds it, answers
// it, and keeps it in a Store across restarts (statefile.ExposedPort).
// cmd/sandbox-mcp wires it into the API as api.Exposer.
package expose

import (
	"context"
	"errors"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/caddyfile"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/caddy"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/internal/preview"
)

// Store keeps the exposed port across sidecar restarts
// (statefile.ExposedPort: the "exposedPort" of the state file).
type Store interface {
	// Load returns the recorded port, nil when none is.
	Load() (*int, error)
	// Save records port.
	Save(port int) error
}

// Options configures an Exposer.
type Options struct {
	// PreviewAddr is the preview proxy's listen address ("127.0.0.1:0" picks a port).
	PreviewAddr string
	// CaddySnippet, Caddyfile and CaddyAdmin locate Caddy's user snippet, main
	// Caddyfile and admin endpoint (host:port or unix//path).
	CaddySnippet, Caddyfile, CaddyAdmin string
	Store                               Store
	// OnExposed, when set, is called with every newly exposed port (the
	// service manager's event stream publishes it as an "exposed" event).
	OnExposed func(port int)
	Logger    *slog.Logger
}

// Exposer is the preview proxy's listener and Caddy's routing.
type Exposer struct {
	store       Store
	onExposed   func(port int)
	proxy       *preview.Proxy
	caddy       *caddy.Manager
	previewAddr string
	log         *slog.Logger
	mu          sync.Mutex // serializes SetExposedPort; guards port
	port        *int

	srv  *http.Server
	ln   net.Listener
	wg   sync.WaitGroup
	stop context.CancelFunc
}

// New listens on o.PreviewAddr, restores the stored exposed port,
// writes the user snippet and, in the background, makes Caddy route the
// preview site to the proxy (a reload only when its config does not already).
func New(ctx context.Context, o Options) (*Exposer, error) {
	if o.Store == nil || o.Logger == nil {
		return nil, errors.New("expose: Store and Logger are required")
	}
	log, store := o.Logger, o.Store
	proxy, err := preview.New(preview.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.PreviewAddr)
	if err != nil {
		return nil, fmt.Errorf("listen on preview address %s: %w", o.PreviewAddr, err)
	}
	cm, err := caddy.New(caddy.Config{
		SnippetPath: o.CaddySnippet,
		Caddyfile:   o.Caddyfile,
		Admin:       o.CaddyAdmin,
		Snippet:     caddyfile.Snippet{Preview: dialAddr(ln.Addr().(*net.TCPAddr))},
		Logger:      log,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	e := &Exposer{store: store, onExposed: o.OnExposed, proxy: proxy, caddy: cm, previewAddr: ln.Addr().String(), log: log.With("component", "expose"), ln: ln}
	port, err := store.Load()
	if err != nil {
		// The preview still works once a port is exposed again.
		e.log.Warn("exposed port not restored", "err", err)
	}
	if port != nil {
		proxy.SetPort(*port)
		e.port = port
	}
	e.srv = &http.Server{
		Handler:           proxy,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	bctx, stop := context.WithCancel(ctx)
	e.stop = stop
	e.wg.Add(2)
	go func() {
		defer e.wg.Done()
		if err := e.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error("preview proxy stopped", "err", err)
		}
	}()
	go func() {
		defer e.wg.Done()
		e.routeAtBoot(bctx)
	}()
	e.log.Info("preview proxy listening", "addr", e.previewAddr, "exposed_port", e.ExposedPort())
	return e, nil
}

// routeAtBoot writes the snippet and retries Ensure while Caddy starts.
func (e *Exposer) routeAtBoot(ctx context.Context) {
	if err := e.caddy.WriteSnippet(ctx); err != nil {
		e.log.Warn("write caddy snippet", "err", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := e.caddy.Ensure(ctx)
		if err == nil {
			e.log.Info("caddy routes the preview site to the preview proxy", "admin", e.caddy.Admin())
			return
		}
		if time.Now().After(deadline) {
			e.log.Warn("caddy does not route the preview site to the preview proxy; POST /api/expose will retry", "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// SetExposedPort points the preview proxy at port and records it. When it
// cannot be recorded (disk full) the port is exposed all the same and the
// failure logged: what the sidecar answers follows what happened, and only a
// restart would forget it.
func (e *Exposer) SetExposedPort(port int) error {
	if port < 1 || port > 65535 {
		return &fault.Error{Status: http.StatusBadRequest, Msg: "port must be an integer between 1 and 65535"}
	}
	// One at a time, so the proxy ends where the recorded port says.
	e.mu.Lock()
	defer e.mu.Unlock()
	e.proxy.SetPort(port)
	e.port = &port
	if err := e.store.Save(port); err != nil {
		e.log.Error("exposed port not recorded; a restart of the sidecar forgets it", "port", port, "err", err)
	}
	e.log.Info("port exposed", "port", port)
	if e.onExposed != nil {
		e.onExposed(port)
	}
	return nil
}

// ExposedPort is the port the preview routes to, nil when none was exposed.
func (e *Exposer) ExposedPort() *int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.port == nil {
		return nil
	}
	p := *e.port
	return &p
}

// EnsureRouted makes Caddy route the preview site to the proxy, loading the snippet only when it does not yet.
func (e *Exposer) EnsureRouted(ctx context.Context) error { return e.caddy.Ensure(ctx) }

// ExposeStatus says which upstream the proxy uses and whether Caddy routes to it.
func (e *Exposer) ExposeStatus(ctx context.Context) apitype.ExposeStatus {
	st := apitype.ExposeStatus{ExposedPort: e.ExposedPort(), PreviewAddr: e.previewAddr}
	port, src := e.proxy.Upstream(ctx)
	st.Upstream = src
	if port != 0 {
		st.UpstreamPort = &port
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	routed, err := e.caddy.Routed(ctx)
	st.CaddyRouted = routed
	if err != nil {
		st.CaddyError = err.Error()
	}
	return st
}

// PreviewAddr is the preview proxy's listen address.
func (e *Exposer) PreviewAddr() string { return e.previewAddr }

// Close stops the boot routing and the preview listener.
func (e *Exposer) Close(ctx context.Context) error {
	e.stop()
	err := e.srv.Shutdown(ctx)
	e.proxy.Close()
	e.wg.Wait()
	return err
}

// dialAddr is where Caddy reaches a listener bound to a, on loopback when a
// is a wildcard address.
func dialAddr(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}
