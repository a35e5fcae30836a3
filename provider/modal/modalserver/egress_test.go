package modalserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// hostAddrs are up to one IPv4 and one IPv6 address of this machine's interfaces,
// neither loopback nor link-local: addresses the local engine's egress proxy refuses
// (they are the host's own) unless a sandbox's EgressHosts lists them.
func hostAddrs() []netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	var v4, v6 netip.Addr
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
			continue
		}
		if ip.Is4() && !v4.IsValid() {
			v4 = ip
		}
		if ip.Is6() && !v6.IsValid() {
			v6 = ip
		}
	}
	var out []netip.Addr
	for _, ip := range []netip.Addr{v4, v6} {
		if ip.IsValid() {
			out = append(out, ip)
		}
	}
	return out
}

// TestAllowlistEgress: a sandbox created through the Go SDK (real gRPC) with
// NetworkAccess ALLOWLIST gets it as the engine's EgressHosts. One listing a host
// address (an HTTP server of the test on this machine's interface, which the engine
// refuses unless listed) reaches it and not the host's other address; one listing
// only a name reaches neither; an empty allow-list and blockNetwork leave the sandbox
// no proxy at all; a malformed entry is InvalidArgument.
func TestAllowlistEgress(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl (the sandboxes run the host's)")
	}
	addrs := hostAddrs()
	if len(addrs) == 0 {
		t.Skip("no non-loopback address to serve on")
	}
	var urls []string
	for _, ip := range addrs {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "reached %s", ip) })}
		done := make(chan struct{})
		go func() { defer close(done); srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close(); <-done })
		urls = append(urls, "http://"+ln.Addr().String()+"/")
	}
	url, _ := startServer(t, modaltest.Engine(t, local.EngineOptions{}))
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "egress-test", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("debian:bookworm-slim", nil)
	create := func(p *modal.SandboxCreateParams) *modal.Sandbox {
		t.Helper()
		sb, err := c.Sandboxes.Create(ctx, app, img, p)
		if err != nil {
			t.Fatalf("Sandboxes.Create(%+v): %v", p, err)
		}
		t.Cleanup(func() { sb.Terminate(context.Background(), nil) })
		return sb
	}
	// get is curl's body and exit code: 0 only for a 2xx answer (the engine's proxy
	// refuses with 403).
	get := func(sb *modal.Sandbox, u string) (string, int) {
		t.Helper()
		out, _, code := execOut(t, ctx, sb, []string{"curl", "-fsS", "--max-time", "10", u}, nil)
		return out, code
	}
	proxy := func(sb *modal.Sandbox) string {
		t.Helper()
		out, _, _ := execOut(t, ctx, sb, []string{"sh", "-c", "echo -n $HTTP_PROXY"}, nil)
		return out
	}
	allow := func(cidrs, domains []string) *modal.SandboxCreateParams {
		return &modal.SandboxCreateParams{OutboundCIDRAllowlist: &modal.Allowlist{Entries: cidrs}, OutboundDomainAllowlist: &modal.Allowlist{Entries: domains}}
	}

	for i, ip := range addrs {
		sb := create(allow([]string{ip.String()}, []string{"example.invalid"}))
		if out, code := get(sb, urls[i]); code != 0 || out != "reached "+ip.String() {
			t.Errorf("with the allow-list %s, GET %s = %q (exit %d), want %q", ip, urls[i], out, code, "reached "+ip.String())
		}
		for j, other := range addrs {
			if j != i {
				if out, code := get(sb, urls[j]); code == 0 {
					t.Errorf("with the allow-list %s, the sandbox reached %s: %q", ip, other, out)
				}
			}
		}
	}
	byName := create(allow(nil, []string{"example.invalid", "*.example.invalid"}))
	for _, u := range urls {
		if out, code := get(byName, u); code == 0 {
			t.Errorf("with only names allowed, the sandbox reached %s: %q", u, out)
		}
	}
	if p := proxy(byName); p == "" {
		t.Errorf("a sandbox with an allow-list has no HTTP_PROXY: it should reach its names through the engine's proxy")
	}
	for name, p := range map[string]*modal.SandboxCreateParams{"an empty allow-list": allow(nil, nil), "blockNetwork": {BlockNetwork: true}} {
		sb := create(p)
		if got := proxy(sb); got != "" {
			t.Errorf("a sandbox with %s has HTTP_PROXY=%q, want no egress", name, got)
		}
		if out, code := get(sb, urls[0]); code == 0 {
			t.Errorf("a sandbox with %s reached %s: %q", name, urls[0], out)
		}
	}
	for _, p := range []*modal.SandboxCreateParams{allow([]string{"example.com"}, nil), allow(nil, []string{"192.0.2.1"}), allow(nil, []string{"a..b"})} {
		if sb, err := c.Sandboxes.Create(ctx, app, img, p); err == nil || !strings.Contains(err.Error(), "network access") {
			if sb != nil {
				sb.Terminate(context.Background(), nil)
			}
			t.Errorf("Sandboxes.Create with CIDRs %q, domains %q = %v; want an InvalidArgument naming the entry",
				p.OutboundCIDRAllowlist.Entries, p.OutboundDomainAllowlist.Entries, err)
		}
	}
}
