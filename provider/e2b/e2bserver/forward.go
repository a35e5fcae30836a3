package e2bserver

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// forwarder is a loopback listener whose connections go to one port inside a
// sandbox, through the engine's DialPort.
type forwarder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	done  bool
}

// forward returns the address of sb's forwarder for port, starting it if needed.
func (s *Server) forward(sb *sandbox, port int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := sb.forwards[port]; ok {
		return f.ln.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	f := &forwarder{ln: ln, conns: map[net.Conn]bool{}}
	sb.forwards[port] = f
	eid := sb.engineID
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f.serve(func(ctx context.Context) (net.Conn, error) { return s.o.Engine.DialPort(ctx, eid, port) }, &s.wg)
	}()
	return ln.Addr().String(), nil
}

func (f *forwarder) track(c net.Conn, on bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if on && f.done {
		return false
	}
	if on {
		f.conns[c] = true
	} else {
		delete(f.conns, c)
	}
	return true
}

func (f *forwarder) serve(dial func(context.Context) (net.Conn, error), wg *sync.WaitGroup) {
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
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			up, err := dial(ctx)
			cancel()
			if err != nil {
				return
			}
			if !f.track(up, true) {
				up.Close()
				return
			}
			defer f.track(up, false)
			defer up.Close()
			pipe(c, up)
		}()
	}
}

// pipe copies both ways until both directions end, half-closing as each ends.
func pipe(a, b net.Conn) {
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

// close stops accepting and ends every forwarded connection.
func (f *forwarder) close() {
	f.mu.Lock()
	f.done = true
	for c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.ln.Close()
}
