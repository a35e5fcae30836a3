package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// MCPVariant selects the "mcp" block of the OpenCode config.
type MCPVariant int

// MCP variants, newest first. MCPNone (the zero value) is what current sandboxes use.
const (
	MCPNone MCPVariant = iota
	MCPPlaywright
	MCPPlaywrightAndSandbox
)

// OpencodeOptions are the inputs of NewOpencodeConfig besides the model.
type OpencodeOptions struct {
	// ProxyBaseURL, when set, is the LLM proxy's URL in the providers' options. Its key
	// never lands in the config: OpenCode reads it from ANTHROPIC_API_KEY (the
	// Anthropic provider by default, LiteLLM through "{env:…}"), which holds the
	// placeholder of the key when the key travels as a secret (LLMSecrets).
	ProxyBaseURL string
	// Instructions are extra instruction files; whitespace-only entries are dropped and
	// kept entries are not trimmed. The block is omitted when nothing is left.
	Instructions []string
	// LiteLLM adds the OpenAI-compatible provider non-Anthropic models go through.
	LiteLLM bool
	// MCP selects the mcp block.
	MCP MCPVariant
	// Paths locates the plugin and the workspace; zero means DefaultPaths.
	Paths Paths
}

// OpencodeConfig is OpenCode's opencode.json. Field order is the key order of the
// encoded JSON.
type OpencodeConfig struct {
	Schema       string               `json:"$schema"`
	Model        string               `json:"model"`
	Provider     OpencodeProviders    `json:"provider"`
	Server       OpencodeServer       `json:"server"`
	Plugin       []string             `json:"plugin"`
	Permission   OpencodePermission   `json:"permission"`
	MCP          map[string]MCPServer `json:"mcp"`
	Instructions []string             `json:"instructions,omitempty"`
}

// OpencodeProviders is the provider block.
type OpencodeProviders struct {
	Anthropic AnthropicProvider `json:"anthropic"`
	LiteLLM   *LiteLLMProvider  `json:"litellm,omitempty"`
}

// AnthropicProvider is {} or {"options": {...}}.
type AnthropicProvider struct {
	Options *ProviderOptions `json:"options,omitempty"`
}

// ProviderOptions point a provider at the LLM proxy.
type ProviderOptions struct {
	BaseURL string `json:"baseURL,omitempty"`
	APIKey  string `json:"apiKey,omitempty"`
}

// LiteLLMProvider is the OpenAI-compatible provider block.
type LiteLLMProvider struct {
	NPM     string                 `json:"npm"`
	Name    string                 `json:"name"`
	Options ProviderOptions        `json:"options"`
	Models  map[string]OpencodeTag `json:"models"`
}

// OpencodeTag is a display name.
type OpencodeTag struct {
	Name string `json:"name"`
}

// OpencodeServer is where OpenCode listens.
type OpencodeServer struct {
	Port     int    `json:"port"`
	Hostname string `json:"hostname"`
}

// OpencodePermission allows everything but interactive questions.
type OpencodePermission struct {
	All      string `json:"*"`
	Question string `json:"question"`
}

// MCPServer is a local MCP server entry.
type MCPServer struct {
	Type        string            `json:"type"`
	Command     []string          `json:"command"`
	Enabled     bool              `json:"enabled"`
	Environment map[string]string `json:"environment,omitempty"`
}

// opencodeEnvKey is OpenCode's reference to the key in its environment: the config
// holds the variable's name, never its value.
const opencodeEnvKey = "{env:" + EnvAnthropicAPIKey + "}"

// NewOpencodeConfig builds the OpenCode config for an OpenCode model id (see
// ToOpencodeModelID).
func NewOpencodeConfig(opencodeModelID string, o OpencodeOptions) OpencodeConfig {
	p := o.Paths
	if p == (Paths{}) {
		p = DefaultPaths()
	}
	var opts *ProviderOptions
	var keyRef string
	if o.ProxyBaseURL != "" {
		opts = &ProviderOptions{BaseURL: o.ProxyBaseURL}
		keyRef = opencodeEnvKey
	}
	c := OpencodeConfig{
		Schema:     "https://opencode.ai/config.json",
		Model:      opencodeModelID,
		Provider:   OpencodeProviders{Anthropic: AnthropicProvider{Options: opts}},
		Server:     OpencodeServer{Port: PortOpenCode, Hostname: "0.0.0.0"},
		Plugin:     []string{p.PluginFile()},
		Permission: OpencodePermission{All: "allow", Question: "deny"},
		MCP:        map[string]MCPServer{},
	}
	if o.LiteLLM {
		models := map[string]OpencodeTag{}
		for _, m := range Models() {
			if id, ok := strings.CutPrefix(m.OpencodeID, "litellm/"); ok {
				models[id] = OpencodeTag{Name: m.Name}
			}
		}
		c.Provider.LiteLLM = &LiteLLMProvider{
			NPM: "@ai-sdk/openai-compatible", Name: "LiteLLM",
			Options: ProviderOptions{BaseURL: o.ProxyBaseURL, APIKey: keyRef},
			Models:  models,
		}
	}
	if o.MCP >= MCPPlaywright {
		c.MCP["playwright"] = MCPServer{Type: "local", Enabled: true,
			Command: []string{"playwright-mcp", "--headless", "--browser", "chromium", "--no-sandbox", "--isolated", "--caps", "vision"}}
	}
	if o.MCP >= MCPPlaywrightAndSandbox {
		c.MCP["sandbox_mcp"] = MCPServer{Type: "local", Enabled: true, Command: []string{"sandbox-mcp", "mcp"},
			Environment: map[string]string{rules.EnvWorkspaceDir: p.Workspace()}}
	}
	for _, in := range o.Instructions {
		if strings.TrimSpace(in) != "" {
			c.Instructions = append(c.Instructions, in)
		}
	}
	return c
}

// JSON encodes the config with 2-space indentation and a trailing newline.
//
// The old code built this text with string templates, so a quote in a model id, URL
// or key produced invalid JSON. Real encoding always yields valid JSON; the price is
// that the text is not byte-identical to the old one (see ComputeBaseSnapshotVersionKey).
func (c OpencodeConfig) JSON() string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(c) // cannot fail: only strings, ints, bools, maps and slices
	return b.String()
}

// ReadyBackoff is the pause after the attempt-th failed readiness probe (1-based):
// 200ms × 1.5^(attempt-1), at most 2s.
func ReadyBackoff(attempt int) time.Duration {
	d := 200 * math.Pow(1.5, float64(attempt-1))
	return time.Duration(math.Min(d, 2000) * float64(time.Millisecond))
}

// ReadyOptions are the seams of WaitForOpenCodeReady.
type ReadyOptions struct {
	// Client sends the probes; nil means a client with OpenCodeProbeTimeout.
	Client *http.Client
	// MaxWait bounds the whole wait; zero means OpenCodeReadyWait.
	MaxWait time.Duration
	// Now and Sleep are the clock; nil means time.Now and a context-aware sleep.
	Now   func() time.Time
	Sleep func(context.Context, time.Duration) error
	// Log receives one line per probe and the final line; nil discards them.
	Log func(string)
}

// WaitForOpenCodeReady probes GET <baseURL>/session until it answers 2xx or MaxWait
// passes, pausing ReadyBackoff between probes. It returns the number of attempts.
func WaitForOpenCodeReady(ctx context.Context, baseURL string, o ReadyOptions) (int, error) {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: OpenCodeProbeTimeout}
	}
	if o.MaxWait <= 0 {
		o.MaxWait = OpenCodeReadyWait
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = sleepCtx
	}
	if o.Log == nil {
		o.Log = func(string) {}
	}
	start := o.Now()
	attempt, lastStatus := 0, 0
	lastErr := ""
	for o.Now().Sub(start) < o.MaxWait {
		attempt++
		status, err := probe(ctx, o.Client, strings.TrimRight(baseURL, "/")+"/session")
		if err == nil && status >= 200 && status < 300 {
			o.Log(fmt.Sprintf("[P-LATENCY] Agent ready after %d attempts (%dms)", attempt, o.Now().Sub(start).Milliseconds()))
			return attempt, nil
		}
		if err != nil {
			lastErr = RedactSecrets(err.Error())
			o.Log(fmt.Sprintf("[P-LATENCY] probe %d failed: %s", attempt, lastErr))
		} else {
			lastStatus = status
			o.Log(fmt.Sprintf("[P-LATENCY] probe %d status %d", attempt, status))
		}
		if err := o.Sleep(ctx, ReadyBackoff(attempt)); err != nil {
			return attempt, fmt.Errorf("wait for opencode: %w", err)
		}
	}
	msg := fmt.Sprintf("[P-LATENCY] Agent not ready after %dms (%d attempts", o.MaxWait.Milliseconds(), attempt)
	if lastStatus != 0 {
		msg += fmt.Sprintf(", lastStatus=%d", lastStatus)
	}
	if lastErr != "" {
		msg += ", lastError=" + lastErr
	}
	return attempt, fmt.Errorf("%s)", msg)
}

func probe(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
