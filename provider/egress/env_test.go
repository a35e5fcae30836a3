package egress

import (
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestEnv: every proxy variable names the sandbox's proxy, and Node's fetch is told to
// use them (it ignores them otherwise).
func TestEnv(t *testing.T) {
	env := Env(3128)
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		if env[k] != "http://127.0.0.1:3128" {
			t.Errorf("Env(3128)[%s] = %q, want http://127.0.0.1:3128", k, env[k])
		}
	}
	if env[rules.EnvNodeUseEnvProxy] != "1" {
		t.Errorf("Env(3128)[%s] = %q, want 1", rules.EnvNodeUseEnvProxy, env[rules.EnvNodeUseEnvProxy])
	}
}
