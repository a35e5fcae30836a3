package e2b

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// recorder is a real in-process gateway that notes who is registered.
type recorder struct {
	*gateway.Gateway
	mu   sync.Mutex
	live map[string]bool
}

func (r *recorder) Register(ctx context.Context, id string, s []engine.Secret) (gateway.Registration, error) {
	r.mu.Lock()
	r.live[id] = true
	r.mu.Unlock()
	return r.Gateway.Register(ctx, id, s)
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
	c, err := NewClient(ClientOptions{APIKey: "test", APIURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	spec := engine.Spec{Secrets: []engine.Secret{{Name: "KEY", Value: "sk-0123456789abcdefghij", Hosts: []string{"api.example.com"}}}}
	e, _ := NewEngine(c, EngineOptions{Template: "base"})
	if _, err := e.Create(t.Context(), spec); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("Create with secrets and no gateway = %v, want ErrUnsupported", err)
	}
	g := gateway.New(gateway.Config{})
	defer g.Close()
	rec := &recorder{Gateway: g, live: map[string]bool{}}
	e, _ = NewEngine(c, EngineOptions{Template: "base", Gateway: &gateway.Engine{Registrar: rec, Addr: "gw.example.com:8090"}})
	if _, err := e.Create(t.Context(), spec); err == nil {
		t.Fatal("Create against an unreachable API succeeded")
	}
	if len(rec.live) != 0 {
		t.Errorf("registrations left after a failed create: %v", rec.live)
	}
}
