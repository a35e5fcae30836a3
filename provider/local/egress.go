package local

// Egress of a sandbox in its own network namespace: init serves an HTTP proxy on
// 127.0.0.1:PortEgressProxy inside, and dials its upstream connections from an OS
// thread that entered the host's network namespace (a socket belongs to the namespace
// it was created in). Names are resolved through the host's resolver the same way.
// What a sandbox may reach is egressPolicy's (egress_policy.go): never the host's
// loopback, its own interface addresses or the private, link-local and metadata
// ranges unless the sandbox's EgressHosts names them, and only the names
// EgressHosts lists when it lists any. The check runs on every address actually
// dialed, after resolution, for plain requests and CONNECT alike.

import (
	"context"
	"errors"
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
	policy    *egressPolicy
	resolver  *net.Resolver
	// lookup resolves a host name on the host; tests replace it.
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
	transport *http.Transport
}

// newEgress builds the proxy of a sandbox whose host network namespace is
// hostFd and whose Spec.EgressHosts is hosts.
func newEgress(hostFd int, hosts []string) (*egress, error) {
	policy, err := newEgressPolicy(hosts)
	if err != nil {
		return nil, err
	}
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	g := &egress{host: hostFd, own: own, policy: policy}
	g.resolver = &net.Resolver{PreferGo: true, Dial: g.dialRaw}
	g.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		return g.resolver.LookupNetIP(ctx, "ip", host)
	}
	g.transport = &http.Transport{DialContext: g.dial, Proxy: nil, MaxIdleConns: 16,
		IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	return g, nil
}

// inHost runs fn on an OS thread that entered the host's network namespace:
// sockets it creates and interfaces it lists are the host's. A thread that
// cannot return to the sandbox's namespace is never reused (it stays locked
// and exits with its goroutine).
func (g *egress) inHost(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(g.host, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("setns: %w", err)
			return
		}
		err := fn()
		if unix.Setns(g.own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// dialRaw dials an address (an IP) from the host's network namespace,
// unchecked: the resolver's way to the host's name servers.
func (g *egress) dialRaw(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := g.inHost(func() error {
		var err error
		d := net.Dialer{Timeout: 30 * time.Second}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// dial checks addr against the policy, resolves it on the host and dials the
// first address the policy allows: the address checked is the address dialed.
func (g *egress) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, ip, port, err := parseAuthority(addr, "")
	if err != nil {
		return nil, err
	}
	if err := g.policy.allowHost(host, ip); err != nil {
		return nil, err
	}
	ips := []netip.Addr{ip}
	if !ip.IsValid() {
		if ips, err = g.lookup(ctx, host); err != nil {
			return nil, err
		}
	}
	var c net.Conn
	err = g.inHost(func() error {
		own, err := hostAddrs()
		if err != nil {
			return fmt.Errorf("list the host's addresses: %w", err)
		}
		var last error = fmt.Errorf("%s: no address: %w", host, errEgressRefused)
		for _, ip := range ips {
			if err := g.policy.checkAddr(ip, own); err != nil {
				last = err
				continue
			}
			d := net.Dialer{Timeout: 30 * time.Second}
			c, err = d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip.WithZone("").Unmap(), port).String())
			if err == nil {
				return nil
			}
			last = err
		}
		return last
	})
	return c, err
}

// hostAddrs are the addresses of the current network namespace's interfaces.
func hostAddrs() (map[netip.Addr]bool, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out[ip.Unmap()] = true
			}
		}
	}
	return out, nil
}

// egressStatus is the answer to a sandbox whose request failed with err.
func egressStatus(err error) int {
	switch {
	case errors.Is(err, errEgressRefused):
		return http.StatusForbidden
	case errors.Is(err, errBadAuthority):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
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
		http.Error(w, err.Error(), egressStatus(err))
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
		http.Error(w, err.Error(), egressStatus(err))
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
