package provider

import "strings"

// AgentOpenCode is the only agent type.
const AgentOpenCode = "opencode"

// DefaultModelID is the canonical id of the default model.
const DefaultModelID = "claude-sonnet-4.6"

// ReasoningEffort is how hard a reasoning model thinks.
type ReasoningEffort string

// Reasoning efforts; ReasoningNormal is the default.
const (
	ReasoningQuick  ReasoningEffort = "quick"
	ReasoningNormal ReasoningEffort = "normal"
	ReasoningDeep   ReasoningEffort = "deep"
)

// AgentConfig chooses the agent and model of a session.
type AgentConfig struct {
	AgentType       string          `json:"agentType"`
	ModelID         string          `json:"modelId"`
	ReasoningEffort ReasoningEffort `json:"reasoningEffort,omitempty"`
}

// Model is one entry of the model registry.
type Model struct {
	ID                string
	Name              string
	Provider          string
	Default           bool
	SupportsReasoning bool
	OpencodeID        string
	APIID             string
}

// Models is the model registry, default first.
func Models() []Model {
	return []Model{
		{"claude-sonnet-4.6", "Sonnet 4.6", "anthropic", true, true, "anthropic/claude-sonnet-4-6", "claude-sonnet-4-6"},
		{"claude-opus-4.6", "Opus 4.6", "anthropic", false, true, "anthropic/claude-opus-4-6", "claude-opus-4-6"},
		{"gpt-5.2", "GPT-5.2", "openai", false, true, "litellm/gpt-5.2", "gpt-5.2"},
		{"gemini-3-pro", "Gemini 3 Pro", "google", false, false, "litellm/gemini-3-pro-preview", "gemini-3-pro-preview"},
		{"gemini-3-flash", "Gemini 3 Flash", "google", false, false, "litellm/gemini-3-flash-preview", "gemini-3-flash-preview"},
		{"deepseek-v3", "DeepSeek V3", "deepseek", false, false, "litellm/deepseek-v3", "deepseek-chat"},
		{"deepseek-r1", "DeepSeek R1", "deepseek", false, true, "litellm/deepseek-r1", "deepseek-reasoner"},
		{"grok-4.1", "Grok 4.1", "xai", false, true, "litellm/grok-4.1", "grok-4.1"},
		{"grok-4.1-fast", "Grok 4.1 Fast", "xai", false, false, "litellm/grok-4.1-fast", "grok-4.1-fast"},
		{"codestral", "Codestral", "mistral", false, false, "litellm/codestral", "codestral-latest"},
	}
}

func lookupModel(id string) (Model, bool) {
	for _, m := range Models() {
		if m.ID == id {
			return m, true
		}
	}
	return Model{}, false
}

func defaultModel() Model { return Models()[0] }

// ToOpencodeModelID maps a canonical id to OpenCode's provider/model id; unknown ids
// map as the default model.
func ToOpencodeModelID(id string) string {
	if m, ok := lookupModel(id); ok {
		return m.OpencodeID
	}
	return defaultModel().OpencodeID
}

// ToAPIModelID maps a canonical id to the provider API's model id; unknown ids map as
// the default model.
func ToAPIModelID(id string) string {
	if m, ok := lookupModel(id); ok {
		return m.APIID
	}
	return defaultModel().APIID
}

// ModelProvider is the model's vendor, "anthropic" for unknown ids.
func ModelProvider(id string) string {
	if m, ok := lookupModel(id); ok {
		return m.Provider
	}
	return "anthropic"
}

// ModelSupportsReasoning reports whether the model takes a reasoning effort.
func ModelSupportsReasoning(id string) bool {
	m, ok := lookupModel(id)
	return ok && m.SupportsReasoning
}

// IsValidModelID reports whether id is in the registry.
func IsValidModelID(id string) bool {
	_, ok := lookupModel(id)
	return ok
}

// IsValidAgentType reports whether t is a known agent type.
func IsValidAgentType(t string) bool { return t == AgentOpenCode }

// DefaultModelIDFor is the default model of an agent type (DefaultModelID for unknown agents).
func DefaultModelIDFor(agent string) string {
	if !IsValidAgentType(agent) {
		return DefaultModelID
	}
	for _, m := range Models() {
		if m.Default {
			return m.ID
		}
	}
	return Models()[0].ID
}

// FormatAgentModel is "<Agent>: <Model>" for display.
func FormatAgentModel(agent, model string) string {
	if !IsValidAgentType(agent) {
		return "Unknown Agent"
	}
	m, ok := lookupModel(model)
	if !ok {
		return "OpenCode"
	}
	return "OpenCode: " + m.Name
}

// ParseModelID maps free text ("Opus 4.6", "gpt-5") to a canonical id; the first rule
// that matches wins and anything unrecognised is the default model. Opus 4.5 maps to
// Opus 4.6, its successor.
func ParseModelID(input string) string {
	s := strings.ToLower(input)
	has := func(sub ...string) bool {
		for _, x := range sub {
			if !strings.Contains(s, x) {
				return false
			}
		}
		return true
	}
	switch {
	case has("sonnet", "4.6"):
		return "claude-sonnet-4.6"
	case has("opus", "4.6"), has("opus", "4.5"):
		return "claude-opus-4.6"
	case has("sonnet"):
		return "claude-sonnet-4.6"
	case has("gpt-5"):
		return "gpt-5.2"
	case has("gemini", "pro"):
		return "gemini-3-pro"
	case has("gemini", "flash"):
		return "gemini-3-flash"
	case has("deepseek", "r1"):
		return "deepseek-r1"
	case has("deepseek"):
		return "deepseek-v3"
	case has("grok", "fast"):
		return "grok-4.1-fast"
	case has("grok"):
		return "grok-4.1"
	case has("codestral"), has("mistral", "code"):
		return "codestral"
	}
	return DefaultModelID
}
