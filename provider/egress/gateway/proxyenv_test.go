package gateway

import (
	"slices"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestProxyEnv: the proxy variables carry the credential, and Node's fetch is told to
// use them (it ignores them otherwise).
func TestProxyEnv(t *testing.T) {
	env := ProxyEnv("gw.example.com:8090", "cred")
	for _, want := range []string{"HTTPS_PROXY=http://cred@gw.example.com:8090", "https_proxy=http://cred@gw.example.com:8090",
		rules.EnvNodeUseEnvProxy + "=1"} {
		if !slices.Contains(env, want) {
			t.Errorf("ProxyEnv = %q, want %s in it", env, want)
		}
	}
}
