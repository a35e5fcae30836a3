package local

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// egressNet is two network namespaces the test makes, joined by a veth pair:
// "host" plays the host the proxy dials from, "peer" a neighbour on its
// network. Each has a public address (the peer's behind a route), a private one,
// a link-local one and a unique-local IPv6 one.
type egressNet struct {
	host, peer string // namespace names
	hostFd     int
	v6         bool
}

const (
	egHostPublic = "198.51.100.1"
	// egPeerPublic is a public address the "host" namespace reaches through a route
	// via the peer: not a special-purpose range, nor a subnet the host is directly
	// connected to, which the policy refuses. Only the test's two namespaces have it.
	egPeerPublic   = "11.78.0.2"
	egHostPrivate  = "10.77.0.1"
	egPeerPrivate  = "10.77.0.2"
	egPeerLinkLoc  = "169.254.77.2"
	egHostULA      = "fd77::1"
	egPeerULA      = "fd77::2"
	egNamespaceDir = "/run/netns/"
)

func ipCmd(t *testing.T, args ...string) error {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func newEgressNet(t *testing.T) *egressNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) not installed")
	}
	id := strconv.Itoa(os.Getpid())
	n := &egressNet{host: "egh-" + id, peer: "egp-" + id}
	for _, ns := range []string{n.host, n.peer} {
		if err := ipCmd(t, "netns", "add", ns); err != nil {
			t.Skipf("cannot make a network namespace: %v", err)
		}
		t.Cleanup(func() {
			if err := ipCmd(t, "netns", "del", ns); err != nil {
				t.Errorf("clean up: %v", err)
			}
		})
	}
	vh, vp := "veh"+id, "vep"+id
	must := func(args ...string) {
		t.Helper()
		if err := ipCmd(t, args...); err != nil {
			t.Fatal(err)
		}
	}
	must("-n", n.host, "link", "add", vh, "type", "veth", "peer", "name", vp, "netns", n.peer)
	for _, a := range [][3]string{
		{n.host, vh, egHostPublic + "/24"}, {n.host, vh, egHostPrivate + "/24"}, {n.host, vh, "169.254.77.1/16"},
		{n.peer, "lo", egPeerPublic + "/32"}, {n.peer, vp, egPeerPrivate + "/24"}, {n.peer, vp, egPeerLinkLoc + "/16"},
	} {
		must("-n", a[0], "addr", "add", a[2], "dev", a[1])
	}
	n.v6 = ipCmd(t, "-n", n.host, "-6", "addr", "add", egHostULA+"/64", "dev", vh, "nodad") == nil &&
		ipCmd(t, "-n", n.peer, "-6", "addr", "add", egPeerULA+"/64", "dev", vp, "nodad") == nil
	for _, l := range [][2]string{{n.host, vh}, {n.host, "lo"}, {n.peer, vp}, {n.peer, "lo"}} {
		must("-n", l[0], "link", "set", l[1], "up")
	}
	must("-n", n.host, "route", "add", egPeerPublic+"/32", "via", egPeerPrivate)
	fd, err := unix.Open(egNamespaceDir+n.host, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	n.hostFd = fd
	return n
}

// serveIn serves, from inside namespace ns, an HTTP server on every address
// of ns that answers "reached <the address it was reached at>"; it returns
// the port.
func (n *egressNet) serveIn(t *testing.T, ns string) string {
	t.Helper()
	nsFd, err := unix.Open(egNamespaceDir+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsFd)
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer unix.Close(own)
		if err := unix.Setns(nsFd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		addr := "[::]:0"
		if !n.v6 {
			addr = "0.0.0.0:0"
		}
		ln, err := net.Listen("tcp", addr)
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := r.Context().Value(http.LocalAddrContextKey).(net.Addr).(*net.TCPAddr)
		ip, _ := netip.AddrFromSlice(local.IP)
		fmt.Fprintf(w, "reached %s", ip.Unmap())
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(r.ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	_, port, _ := net.SplitHostPort(r.ln.Addr().String())
	return port
}

// proxy runs the egress proxy of a sandbox with EgressHosts hosts, dialing
// from the test's "host" namespace, on the test's loopback. Names resolve
// through names.
func (n *egressNet) proxy(t *testing.T, hosts []string, names map[string][]string) *url.URL {
	t.Helper()
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, a := range names[host] {
			out = append(out, netip.MustParseAddr(a))
		}
		if len(out) == 0 {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		return out, nil
	}
	g, closeProxy, err := newEgressProxy(n.hostFd, hosts, lookup)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(g)
	t.Cleanup(func() {
		ts.Close()
		closeProxy()
	})
	u, _ := url.Parse(ts.URL)
	return u
}

// get asks the proxy for target; it returns the status and body.
func proxyGet(t *testing.T, proxy *url.URL, target string) (int, string) {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(target)
	if err != nil {
		t.Fatalf("GET %s through the proxy: %v", target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// proxyConnect opens a CONNECT tunnel to authority and, when it is
// established, sends a GET through it; it returns the CONNECT status and
// the tunneled body.
func proxyConnect(t *testing.T, proxy *url.URL, authority string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", authority, err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET through the tunnel to %s: %v", authority, err)
	}
	b, _ := io.ReadAll(inner.Body)
	return 200, string(b)
}

// Issue 28: the proxy refused loopback, but the host's own interface
// addresses and its private, link-local and unique-local neighbours were
// reachable. In a network namespace the test makes, a sandbox's proxy now
// reaches a public neighbour and nothing else, by literal, by name or through
// CONNECT, unless EgressHosts names it.
func TestEgressRefusesHostAndPrivateAddressesInNetns(t *testing.T) {
	n := newEgressNet(t)
	hostPort, peerPort := n.serveIn(t, n.host), n.serveIn(t, n.peer)
	names := map[string][]string{
		"public.test":    {egPeerPublic},
		"a.allowed.test": {egPeerPublic},
		"host.test":      {egHostPublic},
		"private.test":   {egPeerPrivate},
		"mixed.test":     {egPeerPrivate, egHostPublic, egPeerPublic},
	}
	hp := func(ip, port string) string { return net.JoinHostPort(ip, port) }
	open := n.proxy(t, nil, names)
	type check struct {
		target string // URL for GET, authority for CONNECT
		status int
		body   string
	}
	gets := []check{
		{"http://" + hp(egPeerPublic, peerPort) + "/", 200, "reached " + egPeerPublic},
		{"http://" + hp(egHostPublic, hostPort) + "/", 403, ""},
		{"http://" + hp("::ffff:"+egHostPublic, hostPort) + "/", 403, ""},
		{"http://" + hp(egHostPrivate, hostPort) + "/", 403, ""},
		{"http://" + hp(egPeerPrivate, peerPort) + "/", 403, ""},
		{"http://" + hp("::ffff:"+egPeerPrivate, peerPort) + "/", 403, ""},
		{"http://" + hp(egPeerLinkLoc, peerPort) + "/", 403, ""},
		{"http://" + hp("127.0.0.1", hostPort) + "/", 403, ""},
		{"http://" + hp("0.0.0.0", hostPort) + "/", 403, ""},
		{"http://public.test:" + peerPort + "/", 200, "reached " + egPeerPublic},
		{"http://host.test:" + hostPort + "/", 403, ""},
		{"http://private.test:" + peerPort + "/", 403, ""},
		{"http://mixed.test:" + peerPort + "/", 200, "reached " + egPeerPublic},
	}
	if n.v6 {
		gets = append(gets,
			check{"http://" + hp(egPeerULA, peerPort) + "/", 403, ""},
			check{"http://" + hp(egHostULA, hostPort) + "/", 403, ""})
	}
	for _, c := range gets {
		if code, body := proxyGet(t, open, c.target); code != c.status || (c.body != "" && body != c.body) {
			t.Errorf("GET %s = %d %q, want %d %q", c.target, code, body, c.status, c.body)
		}
	}
	connects := []check{
		{hp(egPeerPublic, peerPort), 200, "reached " + egPeerPublic},
		{hp(egHostPublic, hostPort), 403, ""},
		{hp("::ffff:"+egHostPublic, hostPort), 403, ""},
		{hp(egPeerPrivate, peerPort), 403, ""},
		{hp(egPeerLinkLoc, peerPort), 403, ""},
		{"host.test:" + hostPort, 403, ""},
		{"mixed.test:" + peerPort, 200, "reached " + egPeerPublic},
		{"2130706433:" + hostPort, 400, ""},
		{"198.51.100.1.:" + hostPort, 400, ""},
	}
	for _, c := range connects {
		if code, body := proxyConnect(t, open, c.target); code != c.status || (c.body != "" && body != c.body) {
			t.Errorf("CONNECT %s = %d %q, want %d %q", c.target, code, body, c.status, c.body)
		}
	}

	// With EgressHosts: only the names and addresses it lists.
	listed := n.proxy(t, []string{"*.allowed.test", egPeerPrivate}, names)
	for _, c := range []check{
		{"http://a.allowed.test:" + peerPort + "/", 200, "reached " + egPeerPublic},
		{"http://public.test:" + peerPort + "/", 403, ""},
		{"http://" + hp(egPeerPrivate, peerPort) + "/", 200, "reached " + egPeerPrivate},
		{"http://" + hp(egPeerPublic, peerPort) + "/", 403, ""},
		{"http://" + hp(egHostPublic, hostPort) + "/", 403, ""},
	} {
		if code, body := proxyGet(t, listed, c.target); code != c.status || (c.body != "" && body != c.body) {
			t.Errorf("with EgressHosts: GET %s = %d %q, want %d %q", c.target, code, body, c.status, c.body)
		}
	}
	if code, body := proxyConnect(t, listed, hp(egPeerPrivate, peerPort)); code != 200 || body != "reached "+egPeerPrivate {
		t.Errorf("with EgressHosts: CONNECT to the listed private address = %d %q", code, body)
	}
}
