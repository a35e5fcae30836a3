package local

// Egress of a sandbox in its own network namespace: init serves an HTTP proxy on
// 127.0.0.1:PortEgressProxy inside, and dials its upstream connections from an OS
// thread that entered the host's network namespace (a socket belongs to the namespace
// it was created in). Names are resolved through the host's resolver the same way.
// Destinations on the host's loopback, link-local (cloud metadata) or unspecified
// addresses are refused: the host's own services and other sandboxes' tunnels stay
// out of reach.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

type egress struct {
	host, own int // network namespace descriptors
	resolver  *net.Resolver
	transport *http.Transport
}

func newEgress(hostFd int) (*egress, error) {
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	g := &egress{host: hostFd, own: own}
	g.resolver = &net.Resolver{PreferGo: true, Dial: g.dialRaw}
	g.transport = &http.Transport{DialContext: g.dial, Proxy: nil, MaxIdleConns: 16,
		IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	return g, nil
}

// dialRaw dials an address (an IP) from the host's network namespace.
func (g *egress) dialRaw(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(g.host, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		d := net.Dialer{Timeout: 30 * time.Second}
		c, err := d.DialContext(ctx, network, addr)
		if unix.Setns(g.own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// allowed says whether a sandbox may reach ip.
func allowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	return !(ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsMulticast())
}

// dial resolves addr on the host and dials the first allowed address.
func (g *egress) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = g.resolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, err
		}
	}
	var lastErr error = fmt.Errorf("%s: no address the sandbox may reach", host)
	for _, ip := range ips {
		if !allowed(ip) {
			continue
		}
		c, err := g.dialRaw(ctx, "tcp", net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// serve runs the proxy on the sandbox's loopback.
func (g *egress) serve() error {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(rules.PortEgressProxy))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second}
	go srv.Serve(ln)
	return nil
}

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (g *egress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		g.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		http.Error(w, "this is the sandbox's egress proxy: send absolute http:// URLs or CONNECT", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := g.transport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (g *egress) connect(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	up, err := g.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "no hijack", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		c.Close()
		up.Close()
		return
	}
	// Bytes the client sent after its request are already in the buffer.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		if _, err := up.Write(b); err != nil {
			c.Close()
			up.Close()
			return
		}
	}
	defer c.Close()
	defer up.Close()
	splice(c, up)
}

// proxyEnv is the environment of every command of a sandbox with egress.
func proxyEnv() map[string]string {
	u := "http://127.0.0.1:" + strconv.Itoa(rules.PortEgressProxy)
	no := "localhost,127.0.0.1,::1"
	return map[string]string{"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": no, "no_proxy": no}
}
