package e2b_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway/gatewaytest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// recorder is a real in-process gateway that notes who is registered.
type recorder struct {
	*gateway.Gateway
	mu   sync.Mutex
	live map[string]bool
}

func (r *recorder) Register(ctx context.Context, id string, s []engine.Secret, ttl time.Duration) (gateway.Registration, error) {
	r.mu.Lock()
	r.live[id] = true
	r.mu.Unlock()
	return r.Gateway.Register(ctx, id, s, ttl)
}

func (r *recorder) Unregister(ctx context.Context, id string) error {
	r.mu.Lock()
	delete(r.live, id)
	r.mu.Unlock()
	return r.Gateway.Unregister(ctx, id)
}

// TestCreateSecrets checks that Spec.Secrets is refused without a gateway, never
// degraded to environment variables, and that a failed create with one ends the
// sandbox's registration.
func TestCreateSecrets(t *testing.T) {
	c, err := e2b.NewClient(e2b.ClientOptions{APIKey: "test", APIURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	spec := engine.Spec{Secrets: []engine.Secret{{Name: "KEY", Value: "sk-0123456789abcdefghij", Hosts: []string{"api.example.com"}}}}
	e, _ := e2b.NewEngine(c, e2b.EngineOptions{Template: "base"})
	if _, err := e.Create(t.Context(), spec); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("Create with secrets and no gateway = %v, want ErrUnsupported", err)
	}
	g := gateway.New(gateway.Config{})
	defer g.Close()
	rec := &recorder{Gateway: g, live: map[string]bool{}}
	e, _ = e2b.NewEngine(c, e2b.EngineOptions{Template: "base", Gateway: &gateway.Engine{Registrar: rec, Addr: "gw.example.com:8090"}})
	if _, err := e.Create(t.Context(), spec); err == nil {
		t.Fatal("Create against an unreachable API succeeded")
	}
	if len(rec.live) != 0 {
		t.Errorf("registrations left after a failed create: %v", rec.live)
	}
}

// TestGatewayEndToEnd: a sandbox of the local E2B server created with Spec.Secrets
// through an engine given a gateway: the placeholder inside, the value upstream and
// the echo scrubbed over HTTPS through the sandbox's CA, a placeholder to another host
// refused and counted, and the credential dead after terminate (gatewaytest).
func TestGatewayEndToEnd(t *testing.T) {
	t.Parallel()
	f := gatewaytest.Start(t)
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP, Egress: true})
	eng, err := e2b.NewEngine(srv.Client(t), e2b.EngineOptions{Template: "base", Timeout: 5 * time.Minute, Gateway: f.Engine})
	if err != nil {
		t.Fatal(err)
	}
	f.Run(t, eng)
}

// TestGatewayRelease: a sandbox's credential lives as long as E2B keeps the sandbox
// (the create's connects lengthen it to EngineOptions.Timeout, and the credential
// with it), and Terminate ends it after E2B already dropped the sandbox (Get fails).
func TestGatewayRelease(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := gateway.New(gateway.Config{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	defer g.Close()
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP, Egress: true})
	c := srv.Client(t)
	eng, err := e2b.NewEngine(c, e2b.EngineOptions{Template: "base", Timeout: 5 * time.Minute,
		Gateway: &gateway.Engine{Registrar: g, Addr: "gw.example.com:8090"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := eng.Create(t.Context(), engine.Spec{Timeout: time.Minute,
		Secrets: []engine.Secret{{Name: "KEY", Value: "sk-0123456789abcdefghij", Hosts: []string{"api.example.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Terminate(context.WithoutCancel(t.Context()), info.ID)
	key := info.Labels[gateway.LabelKey]
	mu.Lock()
	now = now.Add(7 * time.Minute) // past the spec's minute and the grace, within 5 minutes and the grace
	mu.Unlock()
	if _, err := g.Counters(key); err != nil {
		t.Fatalf("the credential of a sandbox E2B keeps 5 minutes, after 7: %v", err)
	}
	if err := c.Kill(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Get(t.Context(), info.ID); !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("Get of a killed sandbox = %v, want ErrNotFound", err)
	}
	if err := eng.Terminate(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Counters(key); !errors.Is(err, gateway.ErrUnknown) {
		t.Errorf("Counters after Terminate of a sandbox E2B no longer reports = %v, want ErrUnknown", err)
	}
}
