package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestPlanLLMKeysAsSecrets: with the keys as secrets, no part of the plan holds a
// key (its environment, a step's, a file it writes, the env profile of a restore),
// proxy mode keeps its URL, and without it the plan gives the key as before.
func TestPlanLLMKeysAsSecrets(t *testing.T) {
	const direct, proxied = "sk-ant-api03-DIRECTvalue0123456789", "sk-proxy-PROXYvalue0123456789"
	tests := []struct {
		name      string
		envVars   map[string]string
		proxyURL  string
		snapshot  string
		value     string
		wantProxy bool
	}{
		{"direct", map[string]string{EnvAnthropicAPIKey: direct}, "", "", direct, false},
		{"proxy", map[string]string{EnvLLMProxyAPIKey: proxied, EnvAnthropicAPIKey: direct}, "https://llm.example.com", "", proxied, true},
		{"direct restore", map[string]string{EnvAnthropicAPIKey: direct}, "", "snap-1", direct, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := CreateOptions{SessionID: "s1", SnapshotID: tt.snapshot, EnvVars: tt.envVars}
			cfg := PlanConfig{Kind: KindLocal, Now: time.Unix(1700000000, 0), LLMKeysAsSecrets: true,
				Settings: HostSettings{LLMProxyBaseURL: tt.proxyURL}}
			plan, err := BuildPlan(opts, cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(plan)
			for _, v := range []string{direct, proxied} {
				if strings.Contains(string(b), v) {
					t.Errorf("the plan holds a key: %s", b)
				}
			}
			if _, ok := plan.Env[EnvAnthropicAPIKey]; ok {
				t.Errorf("plan env has %s: %v", EnvAnthropicAPIKey, plan.Env)
			}
			if got := plan.Env[EnvAnthropicBaseURL] != ""; got != tt.wantProxy {
				t.Errorf("plan env %s set = %v, want %v", EnvAnthropicBaseURL, got, tt.wantProxy)
			}
			// Without secrets, the same plan carries the key.
			cfg.LLMKeysAsSecrets = false
			plan, err = BuildPlan(opts, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := json.Marshal(plan); !strings.Contains(string(b), tt.value) {
				t.Errorf("without LLMKeysAsSecrets the plan lacks the key: %s", b)
			}
		})
	}
}

// TestLLMKeysRefused: an engine without isolation refuses a boot with a key unless
// the caller accepts the key inside, and an engine's refusal of the secrets says
// what to do.
func TestLLMKeysRefused(t *testing.T) {
	opts := CreateOptions{SessionID: "s1", EnvVars: map[string]string{EnvAnthropicAPIKey: "sk-ant-api03-value0123456789"}}
	p := &Provider{caps: engine.Capabilities{Isolated: false}, o: Options{Kind: KindLocal, Getenv: func(string) string { return "" }}}
	if _, err := p.llmSecrets(opts); !errors.Is(err, engine.ErrUnsupported) || !errors.Is(err, ErrLLMKeysRefused) || !strings.Contains(err.Error(), "LLMKeysInSandbox") {
		t.Errorf("llmSecrets without isolation = %v, want ErrUnsupported and ErrLLMKeysRefused naming LLMKeysInSandbox", err)
	}
	p.o.LLMKeysInSandbox = true
	if keys, err := p.llmSecrets(opts); err != nil || keys != nil {
		t.Errorf("llmSecrets with LLMKeysInSandbox = %v, %v, want none", keys, err)
	}
	p.o.LLMKeysInSandbox, p.caps.Isolated = false, true
	keys, err := p.llmSecrets(opts)
	if err != nil || len(keys) != 1 {
		t.Fatalf("llmSecrets with isolation = %v, %v, want the key", keys, err)
	}
	refused := fmt.Errorf("modal: Spec.Secrets: configure an egress gateway: %w", engine.ErrUnsupported)
	if err := llmKeysHint(engine.Spec{Secrets: keys}, refused); !errors.Is(err, engine.ErrUnsupported) || !errors.Is(err, ErrLLMKeysRefused) || !strings.Contains(err.Error(), "LLMKeysInSandbox") {
		t.Errorf("llmKeysHint = %v, want the refusal with what to do", err)
	}
	other := engine.Spec{Secrets: []engine.Secret{{Name: "N4_KEY"}}}
	if err := llmKeysHint(other, refused); err != refused {
		t.Errorf("llmKeysHint without an LLM key = %v, want the error as it is", err)
	}
}
