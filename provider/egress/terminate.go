package egress

// TLS termination for a secret's hosts. The sandbox's CONNECT is answered, its TLS is
// terminated with a leaf of the sandbox's own authority for the host it named, and
// the HTTP/1.1 requests inside (ALPN offers http/1.1 only) go through the same
// forward as plain requests: swapped, sent upstream over a new TLS connection that is
// verified against the host's roots (Config.RootCAs), and scrubbed on the way back.
// Every other CONNECT stays a pass-through the proxy cannot read.

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

func (g *Proxy) terminate(w http.ResponseWriter, r *http.Request, host string) {
	authority := r.Host
	c, buffered, err := g.establish(w)
	if err != nil {
		return
	}
	defer g.untrack(c)
	g.terminated.Add(1)
	cert, err := g.secrets.leaf(host)
	if err != nil {
		g.log.Warn("terminate tls", "host", host, "err", err)
		c.Close()
		return
	}
	tc := tls.Server(&prefixConn{Conn: c, prefix: buffered}, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		g.log.Debug("tls handshake with the sandbox", "host", host, "err", err)
		tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	done := make(chan struct{})
	var once sync.Once
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.URL.Scheme, r.URL.Host = "https", authority
			g.forward(w, r, host)
		}),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				once.Do(func() { close(done) })
			}
		},
	}
	_ = srv.Serve(&oneConnListener{c: tc})
	<-done
}

// prefixConn reads prefix before the connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// oneConnListener accepts c once, then reports itself closed.
type oneConnListener struct {
	mu sync.Mutex
	c  net.Conn
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c == nil {
		return nil, net.ErrClosed
	}
	c := l.c
	l.c = nil
	return c, nil
}

func (l *oneConnListener) Close() error { return nil }

func (l *oneConnListener) Addr() net.Addr { return dummyAddr{} }

type dummyAddr struct{}

func (dummyAddr) Network() string { return "tcp" }
func (dummyAddr) String() string  { return "sandbox" }
