package provider

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func TestLLMSecrets(t *testing.T) {
	tests := []struct {
		name     string
		envVars  map[string]string
		proxyURL string
		want     []engine.Secret
	}{
		{"direct", map[string]string{EnvAnthropicAPIKey: "sk-ant-direct"}, "",
			[]engine.Secret{{Name: EnvAnthropicAPIKey, Value: "sk-ant-direct", Hosts: []string{"api.anthropic.com"}}}},
		{"proxy", map[string]string{EnvLLMProxyAPIKey: "sk-proxy"}, "https://llm.example.com:4000/v1",
			[]engine.Secret{{Name: EnvAnthropicAPIKey, Value: "sk-proxy", Hosts: []string{"llm.example.com"}}}},
		{"no key", map[string]string{}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := PrepareSandboxEnv("s1", tt.envVars, tt.proxyURL)
			rest, got, err := LLMSecrets(e)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("LLMSecrets (-want +got):\n%s", diff)
			}
			if _, ok := rest.Env[EnvAnthropicAPIKey]; ok {
				t.Errorf("the key is still in the environment: %v", rest.Env)
			}
			if _, ok := e.Env[EnvAnthropicAPIKey]; !ok {
				t.Error("LLMSecrets changed its argument's environment")
			}
		})
	}
}
