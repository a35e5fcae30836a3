package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// connectThrough opens a CONNECT tunnel to authority through the proxy at proxyAddr
// and returns the connection once the proxy answered 200.
func connectThrough(t *testing.T, proxyAddr, authority string) (net.Conn, *bufio.Reader) {
	t.Helper()
	raw, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	raw.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(raw, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReader(raw)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT %s = %v, %v; want 200", authority, resp, err)
	}
	return raw, br
}

// endedNotTimedOut fails unless a read of r ends with EOF or another error that is
// not its deadline: the proxy closed the tunnel.
func endedNotTimedOut(t *testing.T, what string, r io.Reader) {
	t.Helper()
	_, err := io.ReadAll(r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("%s: still open after Close (the read ran into its deadline)", what)
	}
}

// TestProxyCloseEndsTunnels: Close (the gateway's revocation of a sandbox's
// credential) ends the CONNECT tunnels already open, a pass-through one and one whose
// TLS the proxy terminated for a secret, and refuses new ones.
func TestProxyCloseEndsTunnels(t *testing.T) {
	s := testSecrets(t)
	ca := newTestCA(t)
	up := newUpstream(t, ca, testHost, "other.test")
	g, proxy := startProxy(t, s, ca.pool, nil)

	pass, passBR := connectThrough(t, proxy.Host, "other.test:"+up.port())

	raw, br := connectThrough(t, proxy.Host, testHost+":"+up.port())
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.TrustPEM())
	tc := tls.Client(&bufConn{Conn: raw, r: br}, &tls.Config{ServerName: testHost, RootCAs: roots})
	fmt.Fprintf(tc, "GET /v1 HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\n\r\n", testHost, s.list[0].placeholder)
	tbr := bufio.NewReader(tc)
	resp, err := http.ReadResponse(tbr, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request in the terminated tunnel = %v, %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	// Both tunnels are open and idle; Close ends them.
	pass.SetDeadline(time.Now().Add(10 * time.Second))
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	g.Close()
	endedNotTimedOut(t, "the pass-through tunnel", passBR)
	endedNotTimedOut(t, "the terminated tunnel", tbr)

	// A CONNECT after Close gets no tunnel.
	late, err := net.Dial("tcp", proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	late.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(late, "CONNECT other.test:%s HTTP/1.1\r\nHost: x\r\n\r\n", up.port())
	if resp, err := http.ReadResponse(bufio.NewReader(late), &http.Request{Method: http.MethodConnect}); err == nil && resp.StatusCode == 200 {
		t.Error("a CONNECT after Close was answered 200")
	}
}

// bufConn reads through r, which may hold bytes already read from Conn.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }
