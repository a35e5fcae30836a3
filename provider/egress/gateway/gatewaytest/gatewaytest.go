// Package gatewaytest checks an engine adapter's gateway path end to end (the tests
// of provider/modal and provider/e2b run it over their local servers): a sandbox
// created with Spec.Secrets holds a placeholder, a request from inside through the
// gateway reaches an upstream with the value and comes back scrubbed, a placeholder
// sent to another host is refused and counted, and the sandbox's proxy credential
// dies at terminate.
//
// On a remote platform a sandbox reaches the gateway directly. A sandbox of the local
// servers has one way out, its engine's egress proxy (rules.PortEgressProxy on its
// loopback), and a client's HTTPS_PROXY names one proxy; so the sandbox runs a relay
// (Node) that carries each connection to its loopback port RelayPort through a CONNECT
// of the engine's proxy to the gateway. The gateway's address (the host's, which the
// engine refuses unless listed) is the sandbox's EgressHosts entry, its only
// destination; the adapter's gateway.Engine.Addr is the relay's. Serve and
// StartRelay are that gateway and relay alone, for tests of other paths through them
// (provider/bastion's LLM call from a bastion session's agent).
package gatewaytest

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// RelayPort is where the relay listens inside the sandbox.
const RelayPort = 18090

// Value is the secret's value; Name its variable; Host the host it may go to.
const (
	Name  = "N4_KEY"
	Value = "sk-ant-api03-GATEWAYE2E0123456789abcdefghij"
	Host  = "example.com" // in the names of httptest's TLS certificate
)

// relayJS listens on argv[1] (loopback) and carries each connection through a
// CONNECT of the proxy at 127.0.0.1:argv[3] to argv[2].
const relayJS = `const net = require("net");
const [port, target, proxy] = process.argv.slice(1);
net.createServer((c) => {
  c.pause();
  const u = net.connect(+proxy, "127.0.0.1", () => u.write("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"));
  let head = Buffer.alloc(0);
  const onHead = (d) => {
    head = Buffer.concat([head, d]);
    const i = head.indexOf("\r\n\r\n");
    if (i < 0) return;
    u.off("data", onHead);
    if (!/^HTTP\/1\.[01] 200/.test(head.toString("latin1", 0, i))) { c.destroy(); u.destroy(); return; }
    if (head.length > i + 4) c.write(head.subarray(i + 4));
    c.pipe(u); u.pipe(c); c.resume();
  };
  u.on("data", onHead);
  u.on("error", () => c.destroy());
  c.on("error", () => u.destroy());
}).listen(+port, "127.0.0.1");`

// Served is a gateway served on the host's non-loopback address until the test ends,
// and what an adapter is given to reach it from a sandbox of the local servers: the
// relay's address (StartRelay).
type Served struct {
	// Gateway is the gateway; Engine is what the adapter under test is given.
	Gateway *gateway.Gateway
	Engine  *gateway.Engine
	// Addr is the gateway's proxy on the host (host:port), and IP its address: a
	// sandbox's EgressHosts entry.
	Addr, IP string
}

// Serve serves a gateway whose sandboxes' proxies follow proxy (its Secrets and Log
// are the gateway's to set) on the host's non-loopback address; it skips the test
// without one, and without node (the relay; the sandboxes of the engine's default
// root run the host's) it skips, or fails under $CI. Everything stops when the test ends.
func Serve(t *testing.T, proxy egress.Config) *Served {
	t.Helper()
	testutil.NeedCommand(t, "node", "the relay; the sandboxes run the host's")
	ip := testutil.HostIPv4()
	if ip == "" {
		t.Skip("no non-loopback IPv4 address to serve the gateway on")
	}
	s := &Served{IP: ip, Gateway: gateway.New(gateway.Config{Proxy: proxy})}
	t.Cleanup(s.Gateway.Close)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s.Gateway}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	s.Addr = ln.Addr().String()
	s.Engine = &gateway.Engine{Registrar: s.Gateway, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(RelayPort))}
	return s
}

// StartRelay starts the relay in sandbox id of e (an adapter given s.Engine, which
// can start detached commands) and waits until it listens on RelayPort.
func (s *Served) StartRelay(ctx context.Context, e engine.Engine, id string) error {
	starter, ok := e.(engine.Starter)
	if !ok {
		return fmt.Errorf("start the relay: %T starts no detached commands", e)
	}
	if _, err := starter.StartDetached(ctx, id, engine.ExecRequest{Argv: []string{"node", "-e", relayJS,
		strconv.Itoa(RelayPort), s.Addr, strconv.Itoa(rules.PortEgressProxy)}}); err != nil {
		return fmt.Errorf("start the relay: %w", err)
	}
	var out bytes.Buffer
	wait := fmt.Sprintf("for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/%d) 2>/dev/null && exit 0; sleep 0.1; done; exit 1", RelayPort)
	code, err := e.Exec(ctx, id, engine.ExecRequest{Argv: []string{"bash", "-c", wait}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	if err == nil && code != 0 {
		err = fmt.Errorf("exit code %d: %s", code, out.String())
	}
	if err != nil {
		return fmt.Errorf("wait for the relay to listen on %d: %w", RelayPort, err)
	}
	return nil
}

// Fixture is a gateway on the host's address with an upstream behind it.
type Fixture struct {
	*Served

	upPort string
	got    chan string
}

// fakeAddr is the public address every name resolves to in the gateway; its Dial
// sends it to the loopback port of the same number (the upstream).
var fakeAddr = netip.MustParseAddr("9.9.9.9")

// Start starts the upstream and the gateway. Without curl or node (the sandboxes of
// the engine's default root run the host's) it skips the test, or fails under $CI,
// which installs them; without a non-loopback address it skips. Everything stops
// when the test ends.
func Start(t *testing.T) *Fixture {
	t.Helper()
	for _, prog := range []string{"curl", "bash"} {
		testutil.NeedCommand(t, prog, "the checks inside; the sandboxes run the host's")
	}
	f := &Fixture{got: make(chan string, 16)}
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.got <- r.Header.Get("X-Api-Key")
		io.WriteString(w, "echo "+r.Header.Get("X-Api-Key"))
	}))
	t.Cleanup(up.Close)
	_, f.upPort, _ = net.SplitHostPort(up.Listener.Addr().String())
	roots := x509.NewCertPool()
	roots.AddCert(up.Certificate())
	f.Served = Serve(t, egress.Config{RootCAs: roots,
		Lookup: func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{fakeAddr}, nil },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil || ap.Addr() != fakeAddr {
				return nil, fmt.Errorf("the test's gateway dials only %s, not %s", fakeAddr, addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ap.Port()))))
		}})
	return f
}

// Spec is the spec of the sandbox Run creates: the secret, and egress to the gateway
// only.
func (f *Fixture) Spec() engine.Spec {
	return engine.Spec{Egress: true, EgressHosts: []string{f.IP},
		Secrets: []engine.Secret{{Name: Name, Value: Value, Hosts: []string{Host}}}}
}

// Run creates a sandbox of f.Spec with e (an adapter given f.Engine, which can start
// detached commands) and checks the gateway path through it.
func (f *Fixture) Run(t *testing.T, e engine.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	info, err := e.Create(ctx, f.Spec())
	if err != nil {
		t.Fatalf("Create with a secret: %v", err)
	}
	terminated := false
	defer func() {
		if !terminated {
			_ = e.Terminate(context.WithoutCancel(ctx), info.ID)
		}
	}()
	key := info.Labels[gateway.LabelKey]
	if key == "" {
		t.Fatalf("the sandbox's labels %v lack its registration (%s)", info.Labels, gateway.LabelKey)
	}
	sh := func(script string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"bash", "-c", script}, Stdout: &out, Stderr: &out, Timeout: time.Minute})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return out.String(), code
	}
	env, _ := sh("env")
	ph, _ := sh("printf %s \"$" + Name + "\"")
	if strings.Contains(env, Value) || !strings.HasPrefix(ph, "sk-ant-api03-") || len(ph) != len(Value) {
		t.Fatalf("inside, $%s = %q (environment holds the value: %v); want a placeholder of the value's shape", Name, ph, strings.Contains(env, Value))
	}
	proxyURL, _ := sh("printf %s \"$HTTPS_PROXY\"")
	pu, err := url.Parse(proxyURL)
	if err != nil || pu.User.Username() == "" {
		t.Fatalf("HTTPS_PROXY = %q, want the gateway with the sandboxes' credential", proxyURL)
	}

	if err := f.StartRelay(ctx, e, info.ID); err != nil {
		t.Fatal(err)
	}

	out, code := sh(`curl -sS --max-time 30 --cacert "$SSL_CERT_FILE" -H "X-Api-Key: $` + Name + `" https://` + Host + ":" + f.upPort + "/")
	if code != 0 || out != "echo "+ph {
		t.Errorf("curl over HTTPS through the gateway = %q (exit %d), want the echo scrubbed: %q", out, code, "echo "+ph)
	}
	select {
	case got := <-f.got:
		if got != Value {
			t.Errorf("upstream got X-Api-Key %q, want the value", got)
		}
	default:
		t.Error("the request did not reach the upstream")
	}
	if out, code := sh(`curl -sS --max-time 30 --cacert "$NODE_EXTRA_CA_CERTS" -o /dev/null -w '%{http_code}' https://` + Host + ":" + f.upPort + "/"); code != 0 || out != "200" {
		t.Errorf("curl trusting $NODE_EXTRA_CA_CERTS alone = %q (exit %d), want 200", out, code)
	} else {
		<-f.got
	}
	before, _ := f.Gateway.Counters(key)
	out, _ = sh(`curl -sS --max-time 30 -o /dev/null -w '%{http_code}' -H "X-Api-Key: $` + Name + `" http://elsewhere.example.net:` + f.upPort + "/")
	after, err := f.Gateway.Counters(key)
	if out != "403" || err != nil || after.Refused != before.Refused+1 {
		t.Errorf("placeholder to another host = %q, refused %d → %d (%v); want 403, counted", out, before.Refused, after.Refused, err)
	}

	terminated = true
	if err := e.Terminate(ctx, info.ID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if _, err := f.Gateway.Counters(key); err == nil {
		t.Error("the registration outlived terminate")
	}
	gu := &url.URL{Scheme: "http", Host: f.Addr, User: pu.User}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(gu)}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + Host + ":" + f.upPort + "/")
	if err != nil {
		t.Fatalf("request with the dead credential: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Errorf("request with the credential after terminate = %d, want 407", resp.StatusCode)
	}
}
