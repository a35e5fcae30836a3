package provider

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// EnvVar is one parsed KEY=VALUE line.
type EnvVar struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// ParseEnvFile parses dotenv text: blank and # lines skipped, an "export " prefix
// dropped, KEY=VALUE split at the first '=', both sides trimmed, one pair of matching
// quotes removed. No escapes, no inline comments; duplicates kept in order. A value
// that is a single quote character becomes "" (the old slicing did the same).
func ParseEnvFile(text string) []EnvVar {
	out := []EnvVar{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "" {
			continue
		}
		if len(v) >= 1 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
			if len(v) >= 2 {
				v = v[1 : len(v)-1]
			} else {
				v = ""
			}
		}
		out = append(out, EnvVar{Key: k, Value: v})
	}
	return out
}

var driveLetter = regexp.MustCompile(`^[a-zA-Z]:`)

// IsValidTargetPath reports whether a secret file path is safe to join to the
// workspace: non-empty, relative, no NUL, no ".." segment, no drive letter. The drive
// letter rule also rejects names like "a:b"; that is kept as the conservative choice
// for a path that ends up holding secrets.
func IsValidTargetPath(p string) bool {
	if p == "" || strings.ContainsRune(p, 0) || strings.HasPrefix(p, "/") || driveLetter.MatchString(p) {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return false
		}
	}
	return true
}

var leadingDotSlash = regexp.MustCompile(`^\./+`)

// NormalizeSecretPath trims a secret file path and removes one leading "./" (with any
// repeated slashes); ok is IsValidTargetPath of the result.
func NormalizeSecretPath(p string) (string, bool) {
	n := leadingDotSlash.ReplaceAllString(strings.TrimSpace(p), "")
	return n, IsValidTargetPath(n)
}

// LLMProxyBaseURL is the LLM proxy's base URL from LLM_PROXY_PUBLIC_URL (preferred) or
// LLM_PROXY_URL, without trailing slashes and ending in /v1; "" when not configured.
func LLMProxyBaseURL(getenv func(string) string) string {
	base := getenv(EnvLLMProxyPublicURL)
	if base == "" {
		base = getenv(EnvLLMProxyURL)
	}
	base = strings.TrimRight(base, "/")
	if base == "" {
		return ""
	}
	if !strings.HasSuffix(base, "/v1") {
		base += "/v1"
	}
	return base
}

// Env keys with special handling in PrepareSandboxEnv.
const (
	EnvAnthropicAPIKey       = "ANTHROPIC_API_KEY"
	EnvAnthropicBaseURL      = "ANTHROPIC_BASE_URL"
	EnvLLMProxyAPIKey        = "LLM_PROXY_API_KEY"
	EnvSandboxMCPAuthToken   = rules.EnvAuthToken
	EnvSessionID             = "SESSION_ID"
	EnvDisableDefaultPlugins = "OPENCODE_DISABLE_DEFAULT_PLUGINS"
)

// SandboxEnv is the environment a sandbox is created with.
type SandboxEnv struct {
	Env map[string]string
	// ProxyBaseURL and ProxyAPIKey are set in proxy mode: a proxy URL is configured and
	// envVars carries LLM_PROXY_API_KEY.
	ProxyBaseURL string
	ProxyAPIKey  string
	// KeysAsSecrets: the LLM keys travel as Spec.Secrets (see LLMSecrets), so Env
	// and every environment the plan gives its steps leave them out; each command's
	// environment gets the engine's placeholder instead.
	KeysAsSecrets bool
}

// ProxyMode reports whether the sandbox talks to the LLM through the proxy.
func (e SandboxEnv) ProxyMode() bool { return e.ProxyBaseURL != "" && e.ProxyAPIKey != "" }

// PrepareSandboxEnv assembles the sandbox environment: SESSION_ID; in proxy mode the
// proxy key and URL as ANTHROPIC_API_KEY/ANTHROPIC_BASE_URL, else the direct key (or
// ""); every other envVars entry (a user SESSION_ID wins); and
// OPENCODE_DISABLE_DEFAULT_PLUGINS=true last, for every provider, so no caller can
// turn the default plugins back on (the old Modal code let a user value win).
func PrepareSandboxEnv(sessionID string, envVars map[string]string, proxyBaseURL string) SandboxEnv {
	env := map[string]string{EnvSessionID: sessionID}
	out := SandboxEnv{Env: env}
	if proxyBaseURL != "" && envVars[EnvLLMProxyAPIKey] != "" {
		out.ProxyBaseURL, out.ProxyAPIKey = proxyBaseURL, envVars[EnvLLMProxyAPIKey]
		env[EnvAnthropicAPIKey] = out.ProxyAPIKey
		env[EnvAnthropicBaseURL] = out.ProxyBaseURL
	} else {
		env[EnvAnthropicAPIKey] = envVars[EnvAnthropicAPIKey]
	}
	for k, v := range envVars {
		switch k {
		case EnvAnthropicAPIKey, EnvLLMProxyAPIKey, EnvAnthropicBaseURL:
			continue
		}
		env[k] = v
	}
	env[EnvDisableDefaultPlugins] = "true"
	return out
}

// EnvProfile is the env profile written on resume: the sandbox env without the proxy
// key and URL in proxy mode (they are passed to OpenCode explicitly).
func (e SandboxEnv) EnvProfile() map[string]string {
	out := make(map[string]string, len(e.Env))
	for k, v := range e.Env {
		if e.ProxyMode() && (k == EnvAnthropicAPIKey || k == EnvAnthropicBaseURL) {
			continue
		}
		out[k] = v
	}
	return out
}

// MergeEnvFile merges envVars into the JSON of the env override file (blank or
// missing means {}); new values win. Invalid existing JSON is replaced.
func MergeEnvFile(existing []byte, envVars map[string]string) []byte {
	merged := map[string]string{}
	if strings.TrimSpace(string(existing)) != "" {
		_ = json.Unmarshal(existing, &merged)
		if merged == nil {
			merged = map[string]string{}
		}
	}
	for k, v := range envVars {
		merged[k] = v
	}
	b, _ := json.Marshal(merged)
	return b
}

// HostSettings are the host environment variables this package reads, read once.
type HostSettings struct {
	DefaultProvider       Kind
	SandboxTimeout        time.Duration
	GitPullOnRestore      bool
	GitPullCadenceSeconds int
	ImageVersion          string
	LLMProxyBaseURL       string
}

// LoadHostSettings reads HostSettings through getenv.
func LoadHostSettings(getenv func(string) string) HostSettings {
	s := HostSettings{
		DefaultProvider:  Kind(strings.TrimSpace(getenv(EnvDefaultProvider))),
		SandboxTimeout:   SandboxTimeout(getenv),
		GitPullOnRestore: parseBool(getenv(EnvGitPullOnRestore)),
		ImageVersion:     getenv(EnvSandboxImageVersion),
		LLMProxyBaseURL:  LLMProxyBaseURL(getenv),
	}
	if n, err := strconv.Atoi(strings.TrimSpace(getenv(EnvGitPullCadenceSeconds))); err == nil && n > 0 {
		s.GitPullCadenceSeconds = n
	}
	if s.ImageVersion == "" {
		s.ImageVersion = DefaultImageVersion
	}
	return s
}

func parseBool(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}
