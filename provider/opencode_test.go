package provider

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

func decodeConfig(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("config is not valid JSON: %v\n%s", err, s)
	}
	return m
}

func TestOpencodeConfig(t *testing.T) {
	for _, model := range []string{"claude-sonnet-4-20250514", "claude-3-5-sonnet-20241022", "gpt-4o", "gemini-1.5-pro", "test-model"} {
		t.Run("model "+model, func(t *testing.T) {
			m := decodeConfig(t, NewOpencodeConfig(model, OpencodeOptions{}).JSON())
			if m["model"] != model {
				t.Errorf("model = %v, want %q", m["model"], model)
			}
		})
	}
	m := decodeConfig(t, NewOpencodeConfig("x", OpencodeOptions{}).JSON())
	server := m["server"].(map[string]any)
	if server["port"] != float64(4096) || server["hostname"] != "0.0.0.0" {
		t.Errorf("server = %v", server)
	}
	if diff := cmp.Diff([]any{"/home/user/.config/opencode/plugin/proliferate.mjs"}, m["plugin"]); diff != "" {
		t.Errorf("plugin mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{"*": "allow", "question": "deny"}, m["permission"]); diff != "" {
		t.Errorf("permission mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]any{}, m["mcp"]); diff != "" {
		t.Errorf("mcp mismatch (-want +got):\n%s", diff)
	}
	if _, ok := m["instructions"]; ok {
		t.Errorf("instructions present without instructions")
	}

	// The proxy's key is never in the config: the Anthropic provider reads
	// ANTHROPIC_API_KEY itself, LiteLLM through OpenCode's {env:…} reference.
	tests := []struct {
		name, url     string
		want, litellm any
	}{
		{"default", "", map[string]any{}, map[string]any{}},
		{"proxy", "https://p/v1", map[string]any{"options": map[string]any{"baseURL": "https://p/v1"}},
			map[string]any{"baseURL": "https://p/v1", "apiKey": "{env:ANTHROPIC_API_KEY}"}},
	}
	for _, tt := range tests {
		t.Run("anthropic "+tt.name, func(t *testing.T) {
			m := decodeConfig(t, NewOpencodeConfig("x", OpencodeOptions{ProxyBaseURL: tt.url, LiteLLM: true}).JSON())
			got := m["provider"].(map[string]any)["anthropic"]
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("provider.anthropic mismatch (-want +got):\n%s", diff)
			}
			lite, _ := m["provider"].(map[string]any)["litellm"].(map[string]any)["options"]
			if lite == nil {
				lite = map[string]any{}
			}
			if diff := cmp.Diff(tt.litellm, lite); diff != "" {
				t.Errorf("provider.litellm.options mismatch (-want +got):\n%s", diff)
			}
		})
	}

	mcpTests := []struct {
		name    string
		variant MCPVariant
		want    []string
	}{
		{"later", MCPNone, nil},
		{"middle should not include sandbox_mcp", MCPPlaywright, []string{"playwright"}},
		{"early", MCPPlaywrightAndSandbox, []string{"playwright", "sandbox_mcp"}},
	}
	for _, tt := range mcpTests {
		t.Run("mcp "+tt.name, func(t *testing.T) {
			c := NewOpencodeConfig("x", OpencodeOptions{MCP: tt.variant})
			var got []string
			for k := range c.MCP {
				got = append(got, k)
			}
			if len(got) != len(tt.want) || (len(got) > 0 && c.MCP[tt.want[0]].Type != "local") {
				t.Errorf("mcp keys = %v, want %v", got, tt.want)
			}
			for _, k := range tt.want {
				if _, ok := c.MCP[k]; !ok {
					t.Errorf("mcp lacks %q", k)
				}
			}
		})
	}

	t.Run("instructions filtered, not trimmed", func(t *testing.T) {
		c := NewOpencodeConfig("x", OpencodeOptions{Instructions: []string{" a.md", "   ", "", "b.md"}})
		if diff := cmp.Diff([]string{" a.md", "b.md"}, c.Instructions); diff != "" {
			t.Errorf("instructions mismatch (-want +got):\n%s", diff)
		}
		if c := NewOpencodeConfig("x", OpencodeOptions{Instructions: []string{"  "}}); c.Instructions != nil {
			t.Errorf("instructions = %q, want omitted", c.Instructions)
		}
	})

	// Quirk decided: the old templates produced invalid JSON for a quote in a value.
	t.Run("quotes stay valid JSON", func(t *testing.T) {
		m := decodeConfig(t, NewOpencodeConfig(`model"x`, OpencodeOptions{ProxyBaseURL: `https://p/"v1`}).JSON())
		if m["model"] != `model"x` {
			t.Errorf("model = %v", m["model"])
		}
	})

	t.Run("litellm", func(t *testing.T) {
		c := NewOpencodeConfig("litellm/gpt-5.2", OpencodeOptions{LiteLLM: true})
		if c.Provider.LiteLLM == nil || c.Provider.LiteLLM.Models["gpt-5.2"].Name != "GPT-5.2" || len(c.Provider.LiteLLM.Models) != 8 {
			t.Errorf("litellm = %+v", c.Provider.LiteLLM)
		}
	})
}

func TestOpencodeConfigGolden(t *testing.T) {
	c := NewOpencodeConfig(ToOpencodeModelID(DefaultModelID), OpencodeOptions{LiteLLM: true, ProxyBaseURL: "https://llm-proxy.example.com/v1",
		Instructions: []string{".opencode/instructions.md", "AGENTS.md"}})
	testutil.Golden(t, filepath.Join("testdata", "opencode.json"), []byte(c.JSON()), *update)
}

func TestCaddyfileGolden(t *testing.T) {
	got, err := defaultCaddyfile(DefaultPaths())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "admin off") {
		t.Error("Caddyfile turns the admin endpoint off; sandbox-mcp must be able to load the snippet")
	}
	for _, want := range []string{"admin unix//home/user/.proliferate/caddy/admin/admin.sock", ":20000 {", "127.0.0.1:4001", "handle_path /_proliferate/mcp/*", "reverse_proxy localhost:4000",
		"import /home/user/.proliferate/caddy/user.caddy", "handle {", "localhost:3000", "localhost:5173", "localhost:8000",
		"localhost:4321", "lb_policy first", "-X-Frame-Options", "-Content-Security-Policy", "handle /_proliferate/*", "localhost:8470"} {
		if !strings.Contains(got, want) {
			t.Errorf("Caddyfile lacks %q", want)
		}
	}
	testutil.Golden(t, filepath.Join("testdata", "Caddyfile"), []byte(got), *update)
}

func TestTexts(t *testing.T) {
	for _, want := range []string{"export const ProliferatePlugin", "ProliferatePlugin = async", "return {}"} {
		if !strings.Contains(PluginMJS, want) {
			t.Errorf("PluginMJS lacks %q", want)
		}
	}
	for _, want := range []string{"Docker", "docker compose", "Node.js 20", "Python 3.11", "pnpm", "uv", "pnpm install", "uv sync"} {
		if !strings.Contains(EnvInstructions, want) {
			t.Errorf("EnvInstructions lacks %q", want)
		}
	}
	for _, want := range []string{"proliferate actions list", "proliferate actions guide --integration <name>",
		"proliferate actions run --integration <name> --action <action> --params '<json>'"} {
		if !strings.Contains(ActionsBootstrap, want) {
			t.Errorf("ActionsBootstrap lacks %q", want)
		}
	}
}

func TestComputeBaseSnapshotVersionKey(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	k1 := ComputeBaseSnapshotVersionKey(getenv)
	if len(k1) != 64 || strings.ToLower(k1) != k1 {
		t.Errorf("key = %q, want 64 lowercase hex digits", k1)
	}
	if k2 := ComputeBaseSnapshotVersionKey(getenv); k2 != k1 {
		t.Errorf("key not deterministic: %q then %q", k1, k2)
	}
	env["SANDBOX_IMAGE_VERSION"] = DefaultImageVersion
	if k := ComputeBaseSnapshotVersionKey(getenv); k != k1 {
		t.Errorf("explicit default version changed the key")
	}
	env["SANDBOX_IMAGE_VERSION"] = "v2.0.0"
	if k := ComputeBaseSnapshotVersionKey(getenv); k == k1 {
		t.Errorf("image version did not change the key")
	}
}

func TestModels(t *testing.T) {
	tests := []struct {
		id, opencode, api, provider string
		reasoning                   bool
	}{
		{"claude-sonnet-4.6", "anthropic/claude-sonnet-4-6", "claude-sonnet-4-6", "anthropic", true},
		{"claude-opus-4.6", "anthropic/claude-opus-4-6", "claude-opus-4-6", "anthropic", true},
		{"gpt-5.2", "litellm/gpt-5.2", "gpt-5.2", "openai", true},
		{"gemini-3-pro", "litellm/gemini-3-pro-preview", "gemini-3-pro-preview", "google", false},
		{"gemini-3-flash", "litellm/gemini-3-flash-preview", "gemini-3-flash-preview", "google", false},
		{"deepseek-v3", "litellm/deepseek-v3", "deepseek-chat", "deepseek", false},
		{"deepseek-r1", "litellm/deepseek-r1", "deepseek-reasoner", "deepseek", true},
		{"grok-4.1", "litellm/grok-4.1", "grok-4.1", "xai", true},
		{"grok-4.1-fast", "litellm/grok-4.1-fast", "grok-4.1-fast", "xai", false},
		{"codestral", "litellm/codestral", "codestral-latest", "mistral", false},
		{"unknown", "anthropic/claude-sonnet-4-6", "claude-sonnet-4-6", "anthropic", false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			if got := ToOpencodeModelID(tt.id); got != tt.opencode {
				t.Errorf("ToOpencodeModelID(%q) = %q, want %q", tt.id, got, tt.opencode)
			}
			if got := ToAPIModelID(tt.id); got != tt.api {
				t.Errorf("ToAPIModelID(%q) = %q, want %q", tt.id, got, tt.api)
			}
			if got := ModelProvider(tt.id); got != tt.provider {
				t.Errorf("ModelProvider(%q) = %q, want %q", tt.id, got, tt.provider)
			}
			if got := ModelSupportsReasoning(tt.id); got != tt.reasoning {
				t.Errorf("ModelSupportsReasoning(%q) = %v, want %v", tt.id, got, tt.reasoning)
			}
			if got := IsValidModelID(tt.id); got != (tt.id != "unknown") {
				t.Errorf("IsValidModelID(%q) = %v", tt.id, got)
			}
		})
	}
}

func TestParseModelID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Sonnet 4.6", "claude-sonnet-4.6"},
		{"claude-opus-4.6", "claude-opus-4.6"},
		{"Opus 4.5", "claude-opus-4.6"},
		{"sonnet", "claude-sonnet-4.6"},
		{"GPT-5", "gpt-5.2"},
		{"gemini pro", "gemini-3-pro"},
		{"Gemini Flash", "gemini-3-flash"},
		{"deepseek r1", "deepseek-r1"},
		{"deepseek", "deepseek-v3"},
		{"grok fast", "grok-4.1-fast"},
		{"grok", "grok-4.1"},
		{"codestral", "codestral"},
		{"mistral code", "codestral"},
		{"opus", DefaultModelID},
		{"something else", DefaultModelID},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := ParseModelID(tt.in); got != tt.want {
				t.Errorf("ParseModelID(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestAgentHelpers(t *testing.T) {
	tests := []struct{ name, agent, model, want string }{
		{"known", "opencode", "gpt-5.2", "OpenCode: GPT-5.2"},
		{"unknown model", "opencode", "nope", "OpenCode"},
		{"unknown agent", "nope", "gpt-5.2", "Unknown Agent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatAgentModel(tt.agent, tt.model); got != tt.want {
				t.Errorf("FormatAgentModel(%q, %q) = %q, want %q", tt.agent, tt.model, got, tt.want)
			}
		})
	}
	if got := DefaultModelIDFor("opencode"); got != "claude-sonnet-4.6" {
		t.Errorf("DefaultModelIDFor(opencode) = %q", got)
	}
	if got := DefaultModelIDFor("nope"); got != DefaultModelID {
		t.Errorf("DefaultModelIDFor(nope) = %q", got)
	}
}

func TestReadyBackoff(t *testing.T) {
	us := time.Microsecond
	want := []time.Duration{200000 * us, 300000 * us, 450000 * us, 675000 * us, 1012500 * us, 1518750 * us, 2000000 * us, 2000000 * us}
	for i, w := range want {
		if got := ReadyBackoff(i + 1); got != w {
			t.Errorf("ReadyBackoff(%d) = %v, want %v", i+1, got, w)
		}
	}
}

// fakeClock advances only when slept on.
type fakeClock struct {
	now    time.Time
	sleeps []time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) Sleep(_ context.Context, d time.Duration) error {
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return nil
}

func TestWaitForOpenCodeReady(t *testing.T) {
	tests := []struct {
		name        string
		fail        int // probes answering 503 before 200; -1 = always
		closeConn   bool
		maxWait     time.Duration
		wantAttempt int
		wantErr     string
		wantSleeps  []time.Duration
	}{
		{"first probe ok", 0, false, 0, 1, "", nil},
		{"reject then ok", 1, true, 0, 2, "", []time.Duration{200 * time.Millisecond}},
		{"three failures then ok", 3, true, 0, 4, "", []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 450 * time.Millisecond}},
		{"503 then ok", 1, false, 0, 2, "", []time.Duration{200 * time.Millisecond}},
		// Probes at 0 and 200ms; after the 300ms pause 500ms have passed.
		{"always failing", -1, false, 500 * time.Millisecond, 2, "Agent not ready after 500ms (2 attempts, lastStatus=503)", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			var paths []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := int(calls.Add(1))
				paths = append(paths, r.URL.Path)
				if tt.fail < 0 || n <= tt.fail {
					if tt.closeConn {
						hj, _ := w.(http.Hijacker)
						c, _, _ := hj.Hijack()
						c.Close()
						return
					}
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()
			clk := &fakeClock{now: time.Unix(0, 0)}
			var lines []string
			n, err := WaitForOpenCodeReady(t.Context(), srv.URL, ReadyOptions{Client: srv.Client(), MaxWait: tt.maxWait,
				Now: clk.Now, Sleep: clk.Sleep, Log: func(s string) { lines = append(lines, s) }})
			if n != tt.wantAttempt {
				t.Errorf("attempts = %d, want %d", n, tt.wantAttempt)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("WaitForOpenCodeReady: %v", err)
				}
				if last := lines[len(lines)-1]; !strings.Contains(last, "ready after "+itoa(int64(tt.wantAttempt))+" attempts") {
					t.Errorf("last log = %q", last)
				}
				if diff := cmp.Diff(tt.wantSleeps, clk.sleeps); diff != "" {
					t.Errorf("sleeps mismatch (-want +got):\n%s", diff)
				}
			} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want containing %q", err, tt.wantErr)
			}
			if paths[0] != "/session" {
				t.Errorf("probe path = %q, want /session", paths[0])
			}
		})
	}
	t.Run("context canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := WaitForOpenCodeReady(ctx, "http://127.0.0.1:1", ReadyOptions{MaxWait: time.Second})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
}
