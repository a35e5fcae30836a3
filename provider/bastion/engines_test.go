package bastion_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bserver"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway/gatewaytest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
)

// target is an engine a bastion session is tested on: the local engine
// itself, or the local Modal or E2B server over it, driven through that
// provider's own engine (its protocol, its tunnels, its volumes).
type target struct {
	name string
	// start makes the provider and the engine it drives, or skips; llm is
	// the test's LLM server (host:port), the one upstream of the agent's
	// Spec.Secrets.
	start func(t *testing.T, llm string) setup
}

// setup is a target started: the provider, the engine it drives, a client
// that reaches the engine's published ports, and, where the engine serves
// every port of a sandbox on a public host of its own (E2B), the request to
// that host for a port.
type setup struct {
	p        *provider.Provider
	eng      engine.Engine
	hc       *http.Client
	portHost func(t *testing.T, id string, port int, path string) *http.Request
	// gw carries the agent's Spec.Secrets where the engine's own proxy does
	// not (the local servers: their engine adapters are given its
	// gateway.Engine); nil on the local engine, whose shim's egress proxy
	// swaps them.
	gw *gatewaytest.Served
}

// targets are the engines TestBastionCompromisedAgent runs on.
var targets = []target{
	{name: "local", start: func(t *testing.T, _ string) setup {
		p, eng := newProvider(t)
		return setup{p: p, eng: eng, hc: &http.Client{Timeout: 30 * time.Second}}
	}},
	{name: "modal-local-server", start: startModal},
	{name: "e2b-local-server", start: startE2B},
}

// llmGateway is the egress gateway of the local servers' agents (gatewaytest:
// served on the host's address, reached through a relay in the sandbox): its
// proxies dial nothing but llm, the test's LLM server (host:port), so the
// gateway opens no other way out of the agent.
func llmGateway(t *testing.T, llm string) *gatewaytest.Served {
	t.Helper()
	return gatewaytest.Serve(t, egress.Config{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != llm {
			return nil, fmt.Errorf("the test's gateway dials only the LLM server %s, not %s", llm, addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
}

// llmCall: an LLM call from the agent arrives upstream with the real key;
// where the target has a gateway (gw), through it: the agent's relay started
// first, the swap counted for the agent's registration.
func llmCall(t *testing.T, s *pair, gw *gatewaytest.Served, llmURL string, llmKeys func() []string, llmKey string) {
	t.Helper()
	if gw != nil {
		if err := gw.StartRelay(t.Context(), s.eng, s.res.AgentID); err != nil {
			t.Fatalf("the agent's relay to the egress gateway: %v", err)
		}
	}
	out, code := sh(t, s.eng, s.res.AgentID, `curl -sS --max-time 30 -H "x-api-key: $ANTHROPIC_API_KEY" `+llmURL+`/v1/messages`)
	if code != 0 || out != `{"content":"hi"}` {
		t.Errorf("LLM call from the agent = %d %q", code, out)
	}
	if keys := llmKeys(); !slices.Contains(keys, llmKey) {
		t.Errorf("the upstream got keys %q, want the real one", keys)
	}
	if gw == nil {
		return
	}
	info, err := s.eng.Get(t.Context(), s.res.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := gw.Gateway.Counters(info.Labels[gateway.LabelKey]); err != nil || c.Swapped == 0 {
		t.Errorf("the gateway's counters of the agent = %+v, %v; want its placeholder swapped", c, err)
	}
}

// isolatedEngine is a local engine of the test's own for a local server to
// run on, with sandbox-mcp bound in; every sandbox and volume it made is
// removed at the end.
func isolatedEngine(t testing.TB) *local.Engine {
	t.Helper()
	eng, err := local.NewEngine(local.EngineOptions{DataDir: filepath.Join(t.TempDir(), "data"), SandboxMCP: sandboxMCP})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("the local engine does not isolate here: %v", err)
	}
	if err != nil {
		t.Fatalf("local.NewEngine: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if infos, err := eng.List(ctx); err == nil {
			for _, in := range infos {
				_ = eng.Terminate(ctx, in.ID)
			}
		}
		if vols, err := eng.ListVolumes(ctx); err == nil {
			for _, v := range vols {
				_ = eng.RemoveVolume(ctx, v.Name)
			}
		}
		eng.Close()
	})
	return eng
}

// serve runs serve on a loopback listener until the test ends.
func serve(t *testing.T, serve func(net.Listener) error, stop func()) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(ln) }()
	t.Cleanup(func() {
		stop()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// startModal is the Modal provider over the local Modal server (the base
// image's RUN steps skipped: the sandboxes run on the host's userland, as on
// the local engine), the SDK pointed at it through the environment.
func startModal(t *testing.T, llm string) setup {
	t.Helper()
	gw := llmGateway(t, llm)
	eng := isolatedEngine(t)
	tok := modalserver.Token{ID: "ak-bastion", Secret: "as-bastion"}
	srv, err := modalserver.New(modalserver.Options{Engine: eng, SkipRunSteps: true, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	url := serve(t, srv.Serve, func() { srv.Close() })
	for k, v := range map[string]string{"MODAL_SERVER_URL": url, "MODAL_CONFIG_PATH": filepath.Join(t.TempDir(), "none.toml"),
		"MODAL_PROFILE": "", "MODAL_ENVIRONMENT": ""} {
		t.Setenv(k, v)
	}
	env := map[string]string{"MODAL_TOKEN_ID": tok.ID, "MODAL_TOKEN_SECRET": tok.Secret, "MODAL_APP_NAME": "bastion-test"}
	getenv := func(k string) string { return env[k] }
	me := modal.NewEngine(modal.Options{Getenv: getenv, TLS: srv.TLSConfig(), Gateway: gw.Engine})
	t.Cleanup(func() { me.Close() })
	p, err := provider.New(me, provider.Options{Kind: provider.KindModal, Getenv: getenv, SidecarTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: srv.TLSConfig()}}
	t.Cleanup(hc.CloseIdleConnections)
	return setup{p: p, eng: me, hc: hc, gw: gw}
}

// startE2B is the E2B provider over the local E2B server (template base: the
// engine's default root), its ports through the server's local tunnels.
func startE2B(t *testing.T, llm string) setup {
	t.Helper()
	gw := llmGateway(t, llm)
	eng := isolatedEngine(t)
	const key = "e2b_0123456789abcdef0123456789abcdef01234567"
	srv, err := e2bserver.New(e2bserver.Options{Engine: eng, APIKey: key, Egress: true, Templates: map[string]string{"base": ""}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	url := serve(t, func(ln net.Listener) error { return srv.Serve(ctx, ln) }, cancel)
	c, err := e2b.NewClient(e2b.ClientOptions{APIKey: key, APIURL: url, SandboxURL: url, Domain: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	ee, err := e2b.NewEngine(c, e2b.EngineOptions{Template: "base", LocalTunnels: true, Timeout: 10 * time.Minute, Gateway: gw.Engine})
	if err != nil {
		t.Fatal(err)
	}
	p, err := provider.New(ee, provider.Options{Kind: provider.KindE2B, SidecarTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	host := func(t *testing.T, id string, port int, path string) *http.Request {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = e2b.Host(id, port, "localhost")
		return req
	}
	return setup{p: p, eng: ee, hc: hc, portHost: host, gw: gw}
}
