package egress

// The proxy dials its upstream connections through Config.Dial, on the network of the
// host (never the sandbox's own), and resolves names through Config.Lookup, the host's
// resolver: a sandbox can change neither. The policy check runs on every address
// actually dialed, after resolution, for plain requests and CONNECT alike.

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
	"github.com/proliferate-ai/sandbox-mcp/rules"
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
	// Secrets are the sandbox's secrets (NewSecrets); nil for none. Their hosts are
	// allowed egress (added to Hosts when Hosts is a list) and may resolve to private
	// addresses, since the operator named them.
	Secrets *Secrets
	// RootCAs verifies the upstreams of the hosts whose TLS the proxy terminates (the
	// secrets' hosts); nil uses the host's roots.
	RootCAs *x509.CertPool
	// Log receives what the proxy refuses (never a secret's value); nil discards.
	Log *slog.Logger
}

// Counters are a proxy's counts of its secrets' work since it started.
type Counters struct {
	// Swapped counts placeholders replaced by their values.
	Swapped int64
	// Refused counts requests refused for a placeholder sent to a host not among its
	// secret's hosts.
	Refused int64
	// Terminated counts CONNECTs whose TLS the proxy terminated.
	Terminated int64
}

// Proxy is one sandbox's egress proxy, an http.Handler.
type Proxy struct {
	policy    *Policy
	dialRaw   func(ctx context.Context, network, addr string) (net.Conn, error)
	nets      func() ([]netip.Prefix, error)
	lookup    func(ctx context.Context, host string) ([]netip.Addr, error)
	transport *http.Transport
	secrets   *Secrets
	log       *slog.Logger

	swapped, refused, terminated atomic.Int64

	mu      sync.Mutex
	tunnels map[net.Conn]struct{} // the CONNECTs under way, ended by Close
	closed  bool
}

// New builds a proxy; it fails on a Hosts entry egresshost does not parse.
func New(c Config) (*Proxy, error) {
	hosts := c.Hosts
	if len(hosts) > 0 {
		hosts = append(slices.Clip(hosts), c.Secrets.Hosts()...)
	}
	policy, err := NewPolicy(hosts)
	if err != nil {
		return nil, err
	}
	g := &Proxy{policy: policy, dialRaw: c.Dial, nets: c.LocalNets, lookup: c.Lookup,
		secrets: c.Secrets, log: c.Log}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.log = g.log.With("component", "egress")
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
		IdleConnTimeout: 30 * time.Second, TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig: &tls.Config{RootCAs: c.RootCAs, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
	return g, nil
}

// Counters are the proxy's counts so far.
func (g *Proxy) Counters() Counters {
	return Counters{Swapped: g.swapped.Load(), Refused: g.refused.Load(), Terminated: g.terminated.Load()}
}

// Close ends the proxy's CONNECT tunnels (pass-through and terminated alike) and
// drops its idle upstream connections; a CONNECT after Close is refused. Whoever
// revokes a sandbox's credential (the gateway) so ends what it opened before.
func (g *Proxy) Close() {
	g.mu.Lock()
	g.closed = true
	tunnels := g.tunnels
	g.tunnels = nil
	g.mu.Unlock()
	for c := range tunnels {
		c.Close()
	}
	g.transport.CloseIdleConnections()
}

// track records a tunnel's connection until untrack, so that Close ends it; false
// (and c closed) once the proxy is closed.
func (g *Proxy) track(c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		c.Close()
		return false
	}
	if g.tunnels == nil {
		g.tunnels = map[net.Conn]struct{}{}
	}
	g.tunnels[c] = struct{}{}
	return true
}

func (g *Proxy) untrack(c net.Conn) {
	g.mu.Lock()
	delete(g.tunnels, c)
	g.mu.Unlock()
}

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
	named := g.secrets.Carries(host)
	var last error = fmt.Errorf("%s: no address: %w", host, ErrRefused)
	for _, ip := range ips {
		if err := g.checkAddr(host, ip, own, named); err != nil {
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

// checkAddr is the policy's check of an address host resolved to, about to be dialed.
// A secret's host (named) may resolve to a private address, as an address EgressHosts
// lists may: the operator named it. The hard ranges (loopback, multicast…) stay
// refused.
func (g *Proxy) checkAddr(host string, ip netip.Addr, own []netip.Prefix, named bool) error {
	err := g.policy.CheckResolved(host, ip, own)
	if err == nil || !named {
		return err
	}
	listed, perr := NewPolicy([]string{ip.WithZone("").Unmap().String()})
	if perr != nil {
		return err
	}
	return listed.CheckResolved(host, ip, own)
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
	host, _, _, err := ParseAuthority(r.URL.Host, "80")
	if err != nil {
		http.Error(w, err.Error(), Status(err))
		return
	}
	g.forward(w, r, host)
}

// forward sends r upstream (r.URL is absolute) and copies the response back; on a
// secret's host it swaps the request's placeholders and scrubs the response.
func (g *Proxy) forward(w http.ResponseWriter, r *http.Request, host string) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Host = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	n, err := g.secrets.swapRequest(out, host)
	if err != nil {
		g.refused.Add(1)
		g.log.Warn("refused a request", "host", host, "err", err)
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	g.swapped.Add(int64(n))
	carries := g.secrets.Carries(host)
	if carries {
		// A compressed body could hide the value from the scrub.
		out.Header.Set("Accept-Encoding", "identity")
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
	var body io.Reader = resp.Body
	if carries {
		if body, err = g.scrub(resp); err != nil {
			g.log.Warn("refused a response", "host", host, "err", err)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(flushWriter{w}, body)
}

// scrub scrubs resp's headers in place and returns its body, scrubbed as it is read.
func (g *Proxy) scrub(resp *http.Response) (io.Reader, error) {
	sc := g.secrets.scrubber()
	for k, vs := range resp.Header {
		for i := range vs {
			v, ok := sc.String(vs[i])
			if !ok {
				return nil, errScrub
			}
			vs[i] = v
		}
		resp.Header[k] = vs
	}
	var body io.Reader = resp.Body
	switch enc := strings.ToLower(resp.Header.Get("Content-Encoding")); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("read the gzip response to scrub it: %w", err)
		}
		body = zr
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
	default:
		return nil, fmt.Errorf("the response is %s-encoded, which the proxy cannot scrub of secrets", enc)
	}
	return sc.Reader(body), nil
}

// flushWriter flushes after each write, so a streamed response (server-sent events)
// reaches the sandbox as it arrives.
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

func (g *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	host, ip, _, err := ParseAuthority(r.Host, "")
	if err != nil {
		http.Error(w, err.Error(), Status(err))
		return
	}
	if g.secrets.Carries(host) {
		if err := g.policy.AllowHost(host, ip); err != nil {
			http.Error(w, err.Error(), Status(err))
			return
		}
		g.terminate(w, r, host)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	up, err := g.dial(ctx, "tcp", r.Host)
	cancel()
	if err != nil {
		http.Error(w, err.Error(), Status(err))
		return
	}
	c, buffered, err := g.establish(w)
	if err != nil {
		up.Close()
		return
	}
	defer g.untrack(c)
	defer c.Close()
	defer up.Close()
	// Bytes the client sent after its request are already in the buffer.
	if len(buffered) > 0 {
		if _, err := up.Write(buffered); err != nil {
			return
		}
	}
	portfwd.Splice(c, up)
}

// establish hijacks the CONNECT's connection, tracks it (untrack when done) and
// answers 200; buffered are the bytes the client sent after its request.
func (g *Proxy) establish(w http.ResponseWriter) (net.Conn, []byte, error) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "no hijack", http.StatusInternalServerError)
		return nil, nil, errors.New("the response writer cannot hijack")
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if !g.track(c) {
		return nil, nil, errors.New("the proxy is closed: its sandbox's credential was revoked")
	}
	if _, err := c.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		g.untrack(c)
		c.Close()
		return nil, nil, err
	}
	var buffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		buffered = append(buffered, b...)
	}
	return c, buffered, nil
}

// Env is the environment of every command of a sandbox whose egress proxy listens on
// 127.0.0.1:port inside it (with rules.EnvNodeUseEnvProxy, for Node's fetch).
func Env(port int) map[string]string {
	u := "http://127.0.0.1:" + strconv.Itoa(port)
	no := "localhost,127.0.0.1,::1"
	return map[string]string{"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u,
		"NO_PROXY": no, "no_proxy": no, rules.EnvNodeUseEnvProxy: "1"}
}
