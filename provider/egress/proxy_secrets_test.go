package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// fakeAddr is what every name resolves to in these tests: a public address that the
// test's Dial sends to the loopback port of the same number, so the policy runs as for
// the internet and nothing leaves the machine.
var fakeAddr = netip.MustParseAddr("9.9.9.9")

func fakeLookup(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{fakeAddr}, nil }

func fakeDial(ctx context.Context, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Addr() != fakeAddr {
		return nil, fmt.Errorf("the test dials only %s, not %s", fakeAddr, addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", ap.Port()))
}

// testCA is an upstream's own authority, as a public CA would be.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream test root"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

func (ca *testCA) serverCert(t testing.TB, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// echo answers with what it received, as JSON, and again in a header; /stream writes
// the Authorization header back in 3-byte chunks.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/stream" {
		a := r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "text/plain")
		for i := 0; i < len(a); i += 3 {
			io.WriteString(w, a[i:min(i+3, len(a))])
			w.(http.Flusher).Flush()
		}
		return
	}
	w.Header().Set("X-Echo-Auth", r.Header.Get("Authorization"))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]string{"authorization": r.Header.Get("Authorization"),
		"x-api-key": r.Header.Get("X-Api-Key"), "query": r.URL.RawQuery, "host": r.Host})
})

// upstream records what arrived and echoes it.
type upstream struct {
	*httptest.Server
	got chan http.Header
}

func newUpstream(t testing.TB, ca *testCA, names ...string) *upstream {
	t.Helper()
	u := &upstream{got: make(chan http.Header, 64)}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case u.got <- r.Header.Clone():
		default:
		}
		echo(w, r)
	})
	u.Server = httptest.NewUnstartedServer(h)
	if ca != nil {
		u.TLS = &tls.Config{Certificates: []tls.Certificate{ca.serverCert(t, names...)}}
		u.StartTLS()
	} else {
		u.Start()
	}
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) port() string {
	_, p, _ := net.SplitHostPort(u.Listener.Addr().String())
	return p
}

// startProxy serves a proxy with s over loopback.
func startProxy(t testing.TB, s *Secrets, roots *x509.CertPool, log *slog.Logger) (*Proxy, *url.URL) {
	t.Helper()
	g, err := New(Config{Dial: fakeDial, Lookup: fakeLookup, Secrets: s, RootCAs: roots, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(func() { srv.Close(); g.Close() })
	u, _ := url.Parse(srv.URL)
	return g, u
}

// client goes through the proxy and trusts the sandbox's CA (and nothing else).
func client(t testing.TB, proxy *url.URL, s *Secrets) *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.TrustPEM())
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy),
		TLSClientConfig: &tls.Config{RootCAs: roots}, DisableCompression: true}}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func get(t testing.TB, c *http.Client, u string, header http.Header) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", u, err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestProxySecretsPlainHTTP(t *testing.T) {
	s := testSecrets(t)
	ph := s.list[0].placeholder
	up := newUpstream(t, nil)
	logs := &testutil.Buffer{}
	g, proxy := startProxy(t, s, nil, slog.New(slog.NewTextHandler(logs, nil)))
	c := client(t, proxy, s)

	code, h, body := get(t, c, "http://"+testHost+":"+up.port()+"/v1?key="+ph,
		http.Header{"Authorization": {"Bearer " + ph}, "X-Api-Key": {ph}})
	if code != 200 {
		t.Fatalf("GET = %d %q", code, body)
	}
	arrived := <-up.got
	if got := arrived.Get("Authorization"); got != "Bearer "+testValue {
		t.Errorf("upstream got Authorization %q, want the value", got)
	}
	if got := arrived.Get("X-Api-Key"); got != testValue {
		t.Errorf("upstream got x-api-key %q, want the value", got)
	}
	if strings.Contains(body, testValue) || strings.Contains(h.Get("X-Echo-Auth"), testValue) {
		t.Errorf("the sandbox saw the value: header %q body %q", h.Get("X-Echo-Auth"), body)
	}
	if !strings.Contains(body, `"query":"key=`+ph+`"`) || h.Get("X-Echo-Auth") != "Bearer "+ph {
		t.Errorf("the echo was not scrubbed to the placeholder: header %q body %q", h.Get("X-Echo-Auth"), body)
	}
	code, _, body = get(t, c, "http://"+testHost+":"+up.port()+"/stream", http.Header{"Authorization": {"Bearer " + ph}})
	if code != 200 || body != "Bearer "+ph {
		t.Errorf("streamed echo = %d %q, want the placeholder", code, body)
	}
	<-up.got

	// The placeholder to any other host is refused, counted and logged without it.
	code, _, _ = get(t, c, "http://other.test:"+up.port()+"/", http.Header{"X-Leak": {ph}})
	if code != http.StatusForbidden {
		t.Errorf("placeholder to another host = %d, want 403", code)
	}
	select {
	case h := <-up.got:
		t.Errorf("the refused request arrived upstream: %v", h)
	default:
	}
	if got := g.Counters(); got.Refused != 1 || got.Swapped != 4 {
		t.Errorf("Counters = %+v, want 1 refused, 4 swapped", got)
	}
	if l := logs.String(); !strings.Contains(l, "N4_KEY") || strings.Contains(l, ph) || strings.Contains(l, testValue) {
		t.Errorf("log = %q, want the secret named, neither placeholder nor value", l)
	}
	// Another host without a placeholder is a plain forward, untouched.
	code, _, body = get(t, c, "http://other.test:"+up.port()+"/x?y=1", http.Header{"Authorization": {"Bearer mine"}})
	if code != 200 || !strings.Contains(body, "Bearer mine") {
		t.Errorf("plain forward = %d %q", code, body)
	}
}

func TestProxySecretsHTTPS(t *testing.T) {
	s := testSecrets(t)
	ph := s.list[0].placeholder
	ca := newTestCA(t)
	up := newUpstream(t, ca, testHost, "other.test")
	g, proxy := startProxy(t, s, ca.pool, nil)
	c := client(t, proxy, s)

	code, h, body := get(t, c, "https://"+testHost+":"+up.port()+"/v1", http.Header{"X-Api-Key": {ph}, "Authorization": {"Bearer " + ph}})
	if code != 200 {
		t.Fatalf("GET = %d %q", code, body)
	}
	if got := (<-up.got).Get("X-Api-Key"); got != testValue {
		t.Errorf("upstream got x-api-key %q, want the value", got)
	}
	if strings.Contains(body, testValue) || !strings.Contains(body, ph) || h.Get("X-Echo-Auth") != "Bearer "+ph {
		t.Errorf("the sandbox saw %q / %q, want the echo scrubbed to the placeholder", h.Get("X-Echo-Auth"), body)
	}
	if got := g.Counters().Terminated; got != 1 {
		t.Errorf("Terminated = %d, want 1", got)
	}

	// Another host stays a pass-through: the sandbox sees the upstream's own
	// certificate, which it does not trust, so its client fails...
	req, _ := http.NewRequest("GET", "https://other.test:"+up.port()+"/", nil)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Error("a pass-through host answered with a certificate of the sandbox's CA")
	}
	// ...and one that trusts the upstream's root gets through untouched.
	c2 := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy),
		TLSClientConfig: &tls.Config{RootCAs: ca.pool}}}
	defer c2.CloseIdleConnections()
	code, _, body = get(t, c2, "https://other.test:"+up.port()+"/", http.Header{"Authorization": {"Bearer " + ph}})
	if code != 200 || !strings.Contains(body, ph) {
		t.Errorf("pass-through = %d %q, want the placeholder untouched", code, body)
	}
	if got := g.Counters().Terminated; got != 1 {
		t.Errorf("Terminated = %d after a pass-through, want 1", got)
	}

	// The upstream is verified against the host's roots: without the test root the
	// proxy refuses it.
	_, proxy2 := startProxy(t, s, x509.NewCertPool(), nil)
	code, _, _ = get(t, client(t, proxy2, s), "https://"+testHost+":"+up.port()+"/", nil)
	if code != http.StatusBadGateway {
		t.Errorf("upstream with an untrusted certificate = %d, want 502", code)
	}
}

// TestProxySecretsPrivateAddress checks that a secret's host may resolve to a private
// address, and the hard ranges stay refused.
func TestProxySecretsPrivateAddress(t *testing.T) {
	s := testSecrets(t)
	for _, tt := range []struct {
		addr string
		ok   bool
	}{{"10.1.2.3", true}, {"127.0.0.1", false}} {
		var dialed string
		g, err := New(Config{Secrets: s, Lookup: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr(tt.addr)}, nil
		}, Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialed = addr
			return nil, fmt.Errorf("test: not dialing")
		}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.dial(t.Context(), "tcp", testHost+":443")
		if tt.ok != (dialed != "") {
			t.Errorf("%s at %s: dialed %q, err %v; want dialed=%v", testHost, tt.addr, dialed, err, tt.ok)
		}
		dialed = ""
		g.dial(t.Context(), "tcp", "other.test:443")
		if dialed != "" {
			t.Errorf("other.test at %s was dialed", tt.addr)
		}
	}
}

// TestProxySecretsEgressHosts checks that a secret's hosts join an EgressHosts list
// and leave an empty one (any public host) as it is.
func TestProxySecretsEgressHosts(t *testing.T) {
	s := testSecrets(t)
	g, err := New(Config{Hosts: []string{"pypi.org"}, Secrets: s})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.policy.AllowHost(testHost, netip.Addr{}); err != nil {
		t.Errorf("the secret's host is not allowed: %v", err)
	}
	if err := g.policy.AllowHost("other.test", netip.Addr{}); err == nil {
		t.Error("a host outside both lists is allowed")
	}
	g, _ = New(Config{Secrets: s})
	if err := g.policy.AllowHost("other.test", netip.Addr{}); err != nil {
		t.Errorf("without EgressHosts another host is refused: %v", err)
	}
}

func writeCA(t *testing.T, s *Secrets) string {
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, s.TrustPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestProxySecretsCurl runs curl as the sandbox's client, over plain HTTP and HTTPS.
func TestProxySecretsCurl(t *testing.T) {
	curl := testutil.NeedCommand(t, "curl", "the sandbox's client over HTTP and HTTPS")
	s := testSecrets(t)
	ph := s.list[0].placeholder
	ca := newTestCA(t)
	up := newUpstream(t, ca, testHost)
	plain := newUpstream(t, nil)
	_, proxy := startProxy(t, s, ca.pool, nil)
	caFile := writeCA(t, s)
	for _, u := range []string{"https://" + testHost + ":" + up.port() + "/v1", "http://" + testHost + ":" + plain.port() + "/v1"} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		out, err := exec.CommandContext(ctx, curl, "-sS", "--fail", "-x", proxy.String(), "--cacert", caFile,
			"-H", "x-api-key: "+ph, u).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("curl %s: %v: %s", u, err, out)
		}
		if strings.Contains(string(out), testValue) || !strings.Contains(string(out), `"x-api-key":"`+ph) {
			t.Errorf("curl %s saw %s, want the echo scrubbed to the placeholder", u, out)
		}
		select {
		case h := <-up.got:
			if h.Get("X-Api-Key") != testValue {
				t.Errorf("upstream got %q, want the value", h.Get("X-Api-Key"))
			}
		case h := <-plain.got:
			if h.Get("X-Api-Key") != testValue {
				t.Errorf("upstream got %q, want the value", h.Get("X-Api-Key"))
			}
		case <-time.After(5 * time.Second):
			t.Errorf("nothing arrived upstream for %s", u)
		}
	}
}

// TestProxySecretsConnectBuffered checks that bytes the sandbox sends right behind its
// CONNECT (the TLS hello in the same packet) are not lost by the termination.
func TestProxySecretsConnectBuffered(t *testing.T) {
	s := testSecrets(t)
	ca := newTestCA(t)
	up := newUpstream(t, ca, testHost)
	_, proxy := startProxy(t, s, ca.pool, nil)
	raw, err := net.Dial("tcp", proxy.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(20 * time.Second))
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.TrustPEM())
	// Write the CONNECT and the TLS hello before reading the 200.
	hold := &holdConn{Conn: raw}
	tc := tls.Client(hold, &tls.Config{ServerName: testHost, RootCAs: roots})
	hold.pending = []byte("CONNECT " + testHost + ":" + up.port() + " HTTP/1.1\r\nHost: x\r\n\r\n")
	errc := make(chan error, 1)
	go func() { errc <- tc.Handshake() }()
	if err := <-errc; err != nil {
		t.Fatalf("handshake behind a buffered CONNECT: %v", err)
	}
	fmt.Fprintf(tc, "GET /v1 HTTP/1.1\r\nHost: %s\r\nX-Api-Key: %s\r\nConnection: close\r\n\r\n", testHost, s.list[0].placeholder)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || strings.Contains(string(b), testValue) {
		t.Errorf("response %d %q", resp.StatusCode, b)
	}
}

// holdConn sends pending together with the first write, then strips the proxy's 200
// from the first read.
type holdConn struct {
	net.Conn
	pending []byte
	br      *bufio.Reader
}

func (h *holdConn) Write(b []byte) (int, error) {
	if h.pending != nil {
		_, err := h.Conn.Write(append(h.pending, b...))
		h.pending = nil
		return len(b), err
	}
	return h.Conn.Write(b)
}

func (h *holdConn) Read(b []byte) (int, error) {
	if h.br == nil {
		h.br = bufio.NewReader(h.Conn)
		resp, err := http.ReadResponse(h.br, &http.Request{Method: "CONNECT"})
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != 200 {
			return 0, fmt.Errorf("CONNECT = %d", resp.StatusCode)
		}
	}
	return h.br.Read(b)
}

// denoVersion is the npm package `deno` the test installs (coderun's default).
const denoVersion = "2.9.6"

// deno is a Deno binary: on PATH, or installed from npm into the test cache (the
// network is needed once; without it the test fails within a minute naming the
// registry). Without either deno or npm the test skips, or fails under $CI.
func deno(t *testing.T) string {
	if p, err := exec.LookPath("deno"); err == nil {
		return p
	}
	return testutil.NPMPackages(t, "deno-"+denoVersion, "node_modules/@deno/linux-x64-glibc/deno", "deno@"+denoVersion)
}

// TestProxySecretsDeno runs Deno's fetch through the proxy (HTTPS_PROXY), trusting
// the sandbox's CA through DENO_CERT, as code execution does.
func TestProxySecretsDeno(t *testing.T) {
	bin := deno(t)
	s := testSecrets(t)
	ph := s.list[0].placeholder
	ca := newTestCA(t)
	up := newUpstream(t, ca, testHost)
	_, proxy := startProxy(t, s, ca.pool, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "eval", "--quiet",
		`const r = await fetch(Deno.env.get("TARGET"), {headers: {"x-api-key": Deno.env.get("N4_KEY")}}); console.log(r.status, await r.text());`)
	cmd.Env = append(os.Environ(), "HTTPS_PROXY="+proxy.String(), "DENO_CERT="+writeCA(t, s), "DENO_DIR="+t.TempDir(),
		"NO_COLOR=1", "TARGET=https://"+testHost+":"+up.port()+"/v1", s.Env()[0])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("deno: %v: %s", err, out)
	}
	if strings.Contains(string(out), testValue) || !strings.Contains(string(out), `"x-api-key":"`+ph) {
		t.Errorf("deno saw %s, want the echo scrubbed to the placeholder", out)
	}
	if got := (<-up.got).Get("X-Api-Key"); got != testValue {
		t.Errorf("upstream got %q, want the value", got)
	}
}
