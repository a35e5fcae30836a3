package modal

import (
	"errors"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
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
