package modal

import (
	"errors"
	"testing"

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
