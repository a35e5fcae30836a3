package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// netsProxy serves a proxy on loopback whose Dial never leaves the machine: it
// records the address asked for and connects to target instead (or fails
// when target is empty), so no test traffic goes to the addresses named.
func netsProxy(t *testing.T, c Config, target string) (proxy *url.URL, dialed func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	c.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		mu.Lock()
		seen = append(seen, addr)
		mu.Unlock()
		if target == "" {
			return nil, errors.New("the test dials nothing")
		}
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}
	c.Lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
		// Every name is where some networks' resolvers put every name.
		if strings.HasSuffix(host, ".test") {
			return []netip.Addr{netip.MustParseAddr("203.0.113.80")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	g, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(g)
	t.Cleanup(func() { ts.Close(); g.Close() })
	u, _ := url.Parse(ts.URL)
	return u, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func getThrough(t *testing.T, proxy *url.URL, target string) int {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(target)
	if err != nil {
		t.Fatalf("GET %s through the proxy: %v", target, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// Issue 31, finding 6: the proxy refuses the subnets the host's interfaces are
// directly connected to and the special-purpose ranges before it dials, and
// still dials a public address beside them.
func TestEgressProxyRefusesHostSubnets(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "upstream")
	}))
	t.Cleanup(upstream.Close)
	nets := func() ([]netip.Prefix, error) {
		return []netip.Prefix{netip.MustParsePrefix("93.184.216.9/24"), netip.MustParsePrefix("2606:4700::9/64")}, nil
	}
	proxy, dialed := netsProxy(t, Config{LocalNets: nets}, upstream.Listener.Addr().String())
	for _, tc := range []struct {
		target string
		status int
	}{
		{"http://93.184.216.1/", 403},       // the gateway
		{"http://93.184.216.77:8080/", 403}, // a neighbour
		{"http://93.184.216.255/", 403},     // the subnet's broadcast
		{"http://[2606:4700::1]/", 403},
		{"http://[::ffff:93.184.216.77]/", 403},
		{"http://192.0.2.1/", 403}, // TEST-NET-1
		{"http://198.51.100.1/", 403},
		{"http://203.0.113.1/", 403},
		{"http://192.88.99.1/", 403},
		{"http://[2001:db8::1]/", 403},
		{"http://224.0.0.251/", 403},
		{"http://255.255.255.255/", 403},
		{"http://93.184.217.1/", 200}, // beside the subnet: dialed
	} {
		if got := getThrough(t, proxy, tc.target); got != tc.status {
			t.Errorf("GET %s = %d, want %d", tc.target, got, tc.status)
		}
	}
	if got := dialed(); len(got) != 1 || got[0] != "93.184.217.1:80" {
		t.Errorf("the proxy dialed %q, want only 93.184.217.1:80", got)
	}

	// EgressHosts naming a neighbour opens it, and only it.
	proxy, dialed = netsProxy(t, Config{Hosts: []string{"93.184.216.77"}, LocalNets: nets}, upstream.Listener.Addr().String())
	if got := getThrough(t, proxy, "http://93.184.216.77/"); got != 200 {
		t.Errorf("GET of the listed neighbour = %d, want 200", got)
	}
	if got := getThrough(t, proxy, "http://93.184.216.78/"); got != 403 {
		t.Errorf("GET of an unlisted neighbour = %d, want 403", got)
	}
	if got := dialed(); len(got) != 1 {
		t.Errorf("the proxy dialed %q, want only the listed neighbour", got)
	}
}

// A name EgressHosts lists exactly reaches the documentation address the host's
// resolver gives for it; a wildcard name and the address itself do not.
func TestEgressProxyListedNameIntoDocumentationRange(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(upstream.Close)
	proxy, dialed := netsProxy(t, Config{Hosts: []string{"mirror.test", "*.wild.test"}, LocalNets: func() ([]netip.Prefix, error) { return nil, nil }},
		upstream.Listener.Addr().String())
	for _, tc := range []struct {
		target string
		status int
	}{
		{"http://mirror.test/", 200},
		{"http://a.wild.test/", 403},
		{"http://203.0.113.80/", 403},
	} {
		if got := getThrough(t, proxy, tc.target); got != tc.status {
			t.Errorf("GET %s = %d, want %d", tc.target, got, tc.status)
		}
	}
	if got := dialed(); len(got) != 1 || got[0] != "203.0.113.80:80" {
		t.Errorf("the proxy dialed %q, want only 203.0.113.80:80 for mirror.test", got)
	}
}

// Without hooks the proxy reads this machine's own interfaces: a neighbour on
// its real subnet is refused before anything is dialed.
func TestEgressProxyRefusesMachineSubnet(t *testing.T) {
	nets, err := LocalNets()
	if err != nil {
		t.Fatal(err)
	}
	var neighbour netip.Addr
	for _, n := range nets {
		if n.Addr().Is4() && !n.Addr().IsLoopback() && n.Bits() <= 30 {
			// The subnet's last usable address, or the one before when that is
			// the host itself.
			last := n.Masked().Addr()
			for range (1 << (32 - n.Bits())) - 2 {
				last = last.Next()
			}
			if last == n.Addr() {
				last = last.Prev()
			}
			neighbour = last
			break
		}
	}
	if !neighbour.IsValid() {
		t.Skipf("no IPv4 subnet on this machine's interfaces (%v)", nets)
	}
	proxy, dialed := netsProxy(t, Config{}, "")
	target := "http://" + neighbour.String() + "/"
	if got := getThrough(t, proxy, target); got != 403 {
		t.Errorf("GET %s (a neighbour on %v) = %d, want 403", target, nets, got)
	}
	if got := dialed(); len(got) != 0 {
		t.Errorf("the proxy dialed %q, want nothing", got)
	}
}
