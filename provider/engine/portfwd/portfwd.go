// Package portfwd serves a host listener whose connections go to one port
// inside a sandbox: each accepted connection is dialled through the engine
// (engine.Engine.DialPort) and piped both ways, half-closing as each
// direction ends. The local Modal- and E2B-compatible servers
// (provider/modal/modalserver, provider/e2b/e2bserver) serve their tunnels
// and port forwards with it.
package portfwd

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// DialTimeout bounds dialling the sandbox port for one connection.
const DialTimeout = 10 * time.Second

// Forwarder is one listener forwarding to one sandbox port.
type Forwarder struct {
	ln     net.Listener
	ctx    context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	conns map[net.Conn]struct{} // nil once closed
}

// Start serves ln until Close: every connection it accepts goes to the
// connection dial returns (called with a context that ends at Close and after
// DialTimeout). The goroutines it starts are counted in wg, so the owner can
// wait for them at shutdown.
func Start(ln net.Listener, dial func(context.Context) (net.Conn, error), wg *sync.WaitGroup) *Forwarder {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Forwarder{ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.serve(dial, wg)
	}()
	return f
}

// Addr is the listener's address.
func (f *Forwarder) Addr() net.Addr { return f.ln.Addr() }

// Close stops accepting and ends every forwarded connection; a connection
// whose upstream was still being dialled is refused when the dial returns.
func (f *Forwarder) Close() {
	f.cancel()
	f.ln.Close()
	f.mu.Lock()
	for c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
}

// track adds or removes c; adding to a closed forwarder reports false.
func (f *Forwarder) track(c net.Conn, add bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if add {
		if f.conns == nil {
			return false
		}
		f.conns[c] = struct{}{}
	} else {
		delete(f.conns, c)
	}
	return true
}

func (f *Forwarder) serve(dial func(context.Context) (net.Conn, error), wg *sync.WaitGroup) {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		if !f.track(c, true) {
			c.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.track(c, false)
			defer c.Close()
			ctx, cancel := context.WithTimeout(f.ctx, DialTimeout)
			up, err := dial(ctx)
			cancel()
			if err != nil {
				return
			}
			defer up.Close()
			if !f.track(up, true) {
				return
			}
			defer f.track(up, false)
			Splice(c, up)
		}()
	}
}

// Splice copies both ways between a and b until both directions end, half-closing each
// side as its direction ends (a tunnel, a CONNECT).
func Splice(a, b net.Conn) {
	var wg sync.WaitGroup
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	wg.Add(2)
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}
