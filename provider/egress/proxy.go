package egress

// The proxy dials its upstream connections through Config.Dial, on the network of the
// host (never the sandbox's own), and resolves names through Config.Lookup, the host's
// resolver: a sandbox can change neither. The policy check runs on every address
// actually dialed, after resolution, for plain requests and CONNECT alike.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
)

// Config configures a Proxy.
type Config struct {
	// Hosts is the sandbox's Spec.EgressHosts (egresshost's grammar); empty means any
	// public address.
	Hosts []string
	// Dial dials an IP address (never a name) on the host's network; nil uses a
	// net.Dialer with a 30 s timeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// LocalAddrs lists the addresses of the host's interfaces, which no sandbox may
	// reach unless Hosts names them; nil uses LocalAddrs.
	LocalAddrs func() (map[netip.Addr]bool, error)
	// LocalNets lists the host's interface addresses with their prefix lengths
	// (LocalNets's form): no sandbox may reach them, nor the subnets they are
	// directly connected to, unless Hosts names them. nil uses LocalAddrs when
	// it is set (addresses only), LocalNets otherwise.
	LocalNets func() ([]netip.Prefix, error)
	// Lookup resolves a host name with the host's resolver; nil uses a pure-Go
	// resolver that dials its name servers through Dial.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// Secrets are the sandbox's secrets (NewSecrets); nil for none.
	Secrets *Secrets
}

// Proxy is one sandbox's egress proxy, an http.Handler.
type Proxy struct {
	policy    *Policy
	dialRaw   func(ctx context.Context, network, addr string) (net.Conn, error)
	nets      func() ([]netip.Prefix, error)
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
	transport *http.Transport
}

// New builds a proxy; it fails on a Hosts entry egresshost does not parse.
func New(c Config) (*Proxy, error) {
	policy, err := NewPolicy(c.Hosts)
	if err != nil {
		return nil, err
	}
	g := &Proxy{policy: policy, dialRaw: c.Dial, nets: c.LocalNets, lookup: c.Lookup}
	if g.dialRaw == nil {
		d := &net.Dialer{Timeout: 30 * time.Second}
		g.dialRaw = d.DialContext
	}
	if g.nets == nil && c.LocalAddrs != nil {
		g.nets = addrsAsNets(c.LocalAddrs)
	}
	if g.nets == nil {
		g.nets = LocalNets
	}
	if g.lookup == nil {
		r := &net.Resolver{PreferGo: true, Dial: g.dialRaw}
		g.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return r.LookupNetIP(ctx, "ip", host)
		}
	}
	g.transport = &http.Transport{DialContext: g.dial, Proxy: nil, MaxIdleConns: 16,
		IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	return g, nil
}

// Close drops the proxy's idle upstream connections.
func (g *Proxy) Close() { g.transport.CloseIdleConnections() }

// dial checks addr against the policy, resolves it on the host and dials the
// first address the policy allows: the address checked is the address dialed.
func (g *Proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, ip, port, err := ParseAuthority(addr, "")
	if err != nil {
		return nil, err
	}
	if err := g.policy.AllowHost(host, ip); err != nil {
		return nil, err
	}
	ips := []netip.Addr{ip}
	if !ip.IsValid() {
		if ips, err = g.lookup(ctx, host); err != nil {
			return nil, err
		}
	}
	own, err := g.nets()
	if err != nil {
		return nil, fmt.Errorf("list the host's addresses: %w", err)
	}
	var last error = fmt.Errorf("%s: no address: %w", host, ErrRefused)
	for _, ip := range ips {
		if err := g.policy.CheckResolved(host, ip, own); err != nil {
			last = err
			continue
		}
		c, err := g.dialRaw(ctx, "tcp", netip.AddrPortFrom(ip.WithZone("").Unmap(), port).String())
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// addrsAsNets turns a LocalAddrs hook into a LocalNets one: each address a
// prefix of its own.
func addrsAsNets(addrs func() (map[netip.Addr]bool, error)) func() ([]netip.Prefix, error) {
	return func() ([]netip.Prefix, error) {
		m, err := addrs()
		if err != nil {
			return nil, err
		}
		return addrPrefixes(m), nil
	}
}

// LocalAddrs are the addresses of the current network namespace's interfaces.
func LocalAddrs() (map[netip.Addr]bool, error) {
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

// Status is the HTTP status a sandbox gets for a request that failed with err.
func Status(err error) int {
	switch {
	case errors.Is(err, ErrRefused):
		return http.StatusForbidden
	case errors.Is(err, ErrBadAuthority):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// ServeHTTP proxies one request of the sandbox: an absolute http:// URL or a CONNECT.
func (g *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
		http.Error(w, err.Error(), Status(err))
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

func (g *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	up, err := g.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), Status(err))
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
	portfwd.Splice(c, up)
}

// Env is the environment of every command of a sandbox whose egress proxy listens on
// 127.0.0.1:port inside it.
func Env(port int) map[string]string {
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	no := "localhost,127.0.0.1,::1"
	return map[string]string{"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": no, "no_proxy": no}
}
