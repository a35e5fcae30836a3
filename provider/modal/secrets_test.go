package modal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway/gatewaytest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestCreateSecretsRefused checks that Spec.Secrets is refused without a gateway,
// never degraded to environment variables.
func TestCreateSecretsRefused(t *testing.T) {
	e := NewEngine(Options{})
	spec := engine.Spec{Secrets: []engine.Secret{{Name: "KEY", Value: "sk-0123456789abcdefghij", Hosts: []string{"api.example.com"}}}}
	if _, err := e.Create(t.Context(), spec); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("Create with secrets and no gateway = %v, want ErrUnsupported", err)
	}
}

// TestGatewayEndToEnd: a sandbox of the local Modal server created with Spec.Secrets
// through an engine given a gateway: the placeholder inside, the value upstream and
// the echo scrubbed over HTTPS through the sandbox's CA, a placeholder to another host
// refused and counted, and the credential dead after terminate (gatewaytest).
func TestGatewayEndToEnd(t *testing.T) {
	f := gatewaytest.Start(t)
	_, env := localServer(t, modaltest.Engine(t, local.EngineOptions{}))
	e := NewEngine(Options{Getenv: func(k string) string { return env[k] }, Gateway: f.Engine})
	t.Cleanup(func() { e.Close() })
	f.Run(t, e)
}

// TestGatewayReleaseFinished: a sandbox that ended on its own (its Timeout), which
// Modal reports without its tags, still has its credential ended by Terminate.
func TestGatewayReleaseFinished(t *testing.T) {
	g := gateway.New(gateway.Config{})
	defer g.Close()
	_, env := localServer(t, modaltest.Engine(t, local.EngineOptions{}))
	e := NewEngine(Options{Getenv: func(k string) string { return env[k] },
		Gateway: &gateway.Engine{Registrar: g, Addr: "gw.example.com:8090"}})
	t.Cleanup(func() { e.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	info, err := e.Create(ctx, engine.Spec{Timeout: 10 * time.Second,
		Secrets: []engine.Secret{{Name: "KEY", Value: "sk-0123456789abcdefghij", Hosts: []string{"api.example.com"}}}})
	if err != nil {
		t.Fatal(err)
	}
	key := info.Labels[gateway.LabelKey]
	for i := 0; info.State != engine.StateDead && i < 60; i++ {
		time.Sleep(time.Second)
		if info, err = e.Get(ctx, info.ID); err != nil {
			t.Fatal(err)
		}
	}
	if info.State != engine.StateDead || info.Labels[gateway.LabelKey] != "" {
		t.Fatalf("sandbox past its 10 s: state %s, labels %v; want dead, reported without its tags", info.State, info.Labels)
	}
	if _, err := g.Counters(key); err != nil {
		t.Fatalf("the registration ended before Terminate: %v", err)
	}
	if err := e.Terminate(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Counters(key); !errors.Is(err, gateway.ErrUnknown) {
		t.Errorf("Counters after Terminate of a finished sandbox = %v, want ErrUnknown", err)
	}
}
