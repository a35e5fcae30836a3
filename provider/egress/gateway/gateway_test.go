package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const value = "sk-ant-api03-GATEWAYVALUE0123456789abcdef"

// The test's names resolve to a public address that its Dial sends to the loopback
// port of the same number.
var fakeAddr = netip.MustParseAddr("9.9.9.9")

func testConfig() Config {
	return Config{Proxy: egress.Config{
		Lookup: func(context.Context, string) ([]netip.Addr, error) { return []netip.Addr{fakeAddr}, nil },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ap, err := netip.ParseAddrPort(addr)
			if err != nil || ap.Addr() != fakeAddr {
				return nil, fmt.Errorf("the test dials only %s, not %s", fakeAddr, addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", ap.Port()))
		}}}
}

func TestGateway(t *testing.T) {
	got := make(chan string, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("X-Api-Key")
		io.WriteString(w, "echo "+r.Header.Get("X-Api-Key"))
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())

	g := New(testConfig())
	defer g.Close()
	gw := httptest.NewServer(g)
	defer gw.Close()
	admin, err := AdminHandler(g, "admin-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	adm := httptest.NewServer(admin)
	defer adm.Close()
	ctx := t.Context()
	c := &Client{URL: adm.URL, Token: "admin-token-0123456789"}
	regA, err := c.Register(ctx, "sb-a", []engine.Secret{{Name: "KEY", Value: value, Hosts: []string{"api.secret.test"}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	regB, err := c.Register(ctx, "sb-b", []engine.Secret{{Name: "KEY", Value: value + "b", Hosts: []string{"other.test"}}}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(regA.Env) != 1 || !strings.HasPrefix(regA.Env[0], "KEY=sk-ant-api03-") || len(regA.TrustPEM) == 0 || regA.Credential == regB.Credential {
		t.Fatalf("registration = %+v", regA)
	}
	ph := strings.TrimPrefix(regA.Env[0], "KEY=")
	if _, err := (&Client{URL: adm.URL, Token: "wrong-token-0123456789"}).Register(ctx, "x", nil, 0); err == nil {
		t.Error("registration with a wrong admin token succeeded")
	}

	call := func(cred string) (int, string) {
		gu, _ := url.Parse(gw.URL)
		if cred != "" {
			gu.User = url.User(cred)
		}
		hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(gu)}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequest("GET", "http://api.secret.test:"+port+"/", nil)
		req.Header.Set("X-Api-Key", ph)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := call(regA.Credential); code != 200 || body != "echo "+ph || <-got != value {
		t.Errorf("A's request = %d %q, want the value upstream and the echo scrubbed", code, body)
	}
	// B's credential is not good for A's secret: its proxy does not know A's
	// placeholder, which arrives as it is.
	if code, _ := call(regB.Credential); code != 200 || <-got != ph {
		t.Errorf("B's request with A's placeholder = %d, want it forwarded unswapped", code)
	}
	if code, _ := call(""); code != http.StatusProxyAuthRequired {
		t.Errorf("without a credential = %d, want 407", code)
	}
	if err := c.Unregister(ctx, "sb-a"); err != nil {
		t.Fatal(err)
	}
	if code, _ := call(regA.Credential); code != http.StatusProxyAuthRequired {
		t.Errorf("after unregister = %d, want 407", code)
	}
	if _, err := g.Counters("sb-a"); err == nil {
		t.Error("Counters of an unregistered sandbox")
	}
}
