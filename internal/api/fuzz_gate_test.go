package api

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// FuzzRawRequest sends arbitrary bytes to a server run as the sidecar runs
// it (HTTPServer) and half-closes: every connection ends promptly, nothing
// but health and preflights answers 2xx without the token, and the server
// keeps answering health.
func FuzzRawRequest(f *testing.F) {
	for _, s := range []string{
		"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /api/services HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
		"POST /api/services HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n",
		"GET /api/services HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer x\r\n\r\nGET /api/services HTTP/1.1\r\nHost: x\r\n\r\n",
		"OPTIONS /api/services HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /api/terminal HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"GET /api/health/ HTTP/1.0\r\n\r\n",
		"HEAD /api/auth/check HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		f.Fatal(err)
	}
	// In-memory connections: CI runs 20,000 inputs, which over TCP would
	// leave as many sockets in TIME_WAIT.
	ln := newPipeListener()
	hs, lln := s.HTTPServer(ln, nil)
	go func() { _ = hs.Serve(lln) }()
	f.Cleanup(func() { hs.Close() })
	f.Fuzz(func(t *testing.T, req []byte) {
		if bytes.Contains(req, []byte(testToken)) {
			return // an authorized request is not what this checks
		}
		c := ln.dial()
		defer c.Close()
		go func() {
			_, _ = c.Write(req)
			c.CloseWrite()
		}()
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				c.Close()
			}
		}()
		br := bufio.NewReader(c)
		start := time.Now()
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				if time.Since(start) >= 10*time.Second {
					t.Fatalf("connection still open 10 s after %q was sent and half-closed", req)
				}
				break
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// Pipelined requests blur which answer is whose: a 2xx is
			// fine when health or a preflight was asked for at all.
			if resp.StatusCode/100 == 2 && !bytes.Contains(req, []byte("/api/health")) && !bytes.Contains(req, []byte("OPTIONS")) {
				t.Fatalf("%d without a token for %q", resp.StatusCode, req)
			}
		}
	})
}

// pipeListener is a net.Listener of in-memory connections that support
// half-closing (net.Pipe's do not).
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial returns the client end of a new connection.
func (l *pipeListener) dial() *halfConn {
	cr, sw := io.Pipe() // server to client
	sr, cw := io.Pipe() // client to server
	client := &halfConn{r: cr, w: cw}
	l.conns <- &halfConn{r: sr, w: sw}
	return client
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// halfConn is one end of an in-memory connection; deadlines are ignored.
type halfConn struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func (c *halfConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *halfConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *halfConn) CloseWrite() error           { return c.w.Close() }
func (c *halfConn) Close() error {
	c.w.Close()
	return c.r.Close()
}
func (c *halfConn) LocalAddr() net.Addr              { return pipeAddr{} }
func (c *halfConn) RemoteAddr() net.Addr             { return pipeAddr{} }
func (c *halfConn) SetDeadline(time.Time) error      { return nil }
func (c *halfConn) SetReadDeadline(time.Time) error  { return nil }
func (c *halfConn) SetWriteDeadline(time.Time) error { return nil }
