package provider

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseEnvFile(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []EnvVar
	}{
		{"two pairs", "API_KEY=abc123\nDB_URL=postgres://localhost", []EnvVar{{"API_KEY", "abc123"}, {"DB_URL", "postgres://localhost"}}},
		{"double quoted", `SECRET="has spaces and =signs"`, []EnvVar{{"SECRET", "has spaces and =signs"}}},
		{"single quoted", `SECRET='single quoted'`, []EnvVar{{"SECRET", "single quoted"}}},
		{"comments and blank lines", "# c\n\nA=1\n  # d\n\nB=2\n", []EnvVar{{"A", "1"}, {"B", "2"}}},
		{"export prefix", "export API_KEY=abc\nexport DB_URL=pg", []EnvVar{{"API_KEY", "abc"}, {"DB_URL", "pg"}}},
		{"invalid line", "INVALID_LINE\nVALID=yes", []EnvVar{{"VALID", "yes"}}},
		{"base64 value", "BASE64=abc==def=", []EnvVar{{"BASE64", "abc==def="}}},
		{"empty values", "EMPTY=\nALSO_EMPTY=''", []EnvVar{{"EMPTY", ""}, {"ALSO_EMPTY", ""}}},
		{"spaces around", "  KEY  =  value  ", []EnvVar{{"KEY", "value"}}},
		{"empty", "", []EnvVar{}},
		{"only newlines", "\n\n\n", []EnvVar{}},
		{"CRLF", "A=1\r\nB=2\r\n", []EnvVar{{"A", "1"}, {"B", "2"}}},
		// Quirk decided: a lone quote character is both "starts and ends with a quote"; "" as the old code.
		{"single quote char value", `K="`, []EnvVar{{"K", ""}}},
		{"empty key", "=v", []EnvVar{}},
		{"export two spaces", "export  K=v", []EnvVar{{"K", "v"}}},
		{"mismatched quotes kept", `K="a'`, []EnvVar{{"K", `"a'`}}},
		{"no inline comments", "A=1 # not comment", []EnvVar{{"A", "1 # not comment"}}},
		{"duplicates kept", "A=1\nA=2", []EnvVar{{"A", "1"}, {"A", "2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseEnvFile(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseEnvFile(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func FuzzParseEnvFile(f *testing.F) {
	for _, s := range []string{"A=1", `K="`, "export K='v'", "=\n#\nX"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, kv := range ParseEnvFile(in) {
			if kv.Key == "" || strings.ContainsAny(kv.Key, "\n") || strings.ContainsAny(kv.Value, "\n") {
				t.Fatalf("ParseEnvFile(%q) produced %+v", in, kv)
			}
		}
	})
}

func TestIsValidTargetPath(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{".env", true}, {".env.local", true}, {"apps/web/.env", true}, {"config/.env.production", true},
		{"/etc/passwd", false}, {"/home/user/.env", false},
		{"../etc/passwd", false}, {"foo/../../bar", false}, {"..", false},
		{".env\x00.local", false}, {"", false}, {`C:\Users\file`, false},
		{"./.env", true}, {"a/./b", true}, {"..foo", true}, {".env..bak", true}, {`\..\x`, true},
		// Quirk kept: the drive-letter rule also rejects innocent names.
		{"a:b", false}, {"foo/..", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := IsValidTargetPath(tt.in); got != tt.want {
				t.Errorf("IsValidTargetPath(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestNormalizeSecretPath(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{" ./.env ", ".env", true},
		{".//a/.env", "a/.env", true},
		{"././x", "./x", true},
		{"/abs", "/abs", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := NormalizeSecretPath(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("NormalizeSecretPath(%q) = %q, %v, want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestLLMProxyBaseURL(t *testing.T) {
	tests := []struct{ name, public, internal, want string }{
		{"plain", "https://p.example.com", "", "https://p.example.com/v1"},
		{"trailing slash", "https://p.example.com/", "", "https://p.example.com/v1"},
		{"already v1", "https://p.example.com/v1", "", "https://p.example.com/v1"},
		{"v1 slash", "https://p.example.com/v1/", "", "https://p.example.com/v1"},
		{"v1 slashes", "https://p/v1//", "", "https://p/v1"},
		{"empty", "", "", ""},
		{"internal fallback", "", "http://proxy:4000", "http://proxy:4000/v1"},
		{"public preferred", "https://pub", "http://int", "https://pub/v1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"LLM_PROXY_PUBLIC_URL": tt.public, "LLM_PROXY_URL": tt.internal}
			if got := LLMProxyBaseURL(func(k string) string { return env[k] }); got != tt.want {
				t.Errorf("LLMProxyBaseURL(%q, %q) = %q, want %q", tt.public, tt.internal, got, tt.want)
			}
		})
	}
}

func TestPrepareSandboxEnv(t *testing.T) {
	const proxy = "https://proxy/v1"
	tests := []struct {
		name      string
		envVars   map[string]string
		proxyURL  string
		want      map[string]string
		wantProxy bool
	}{
		{"no proxy no key", nil, "", map[string]string{"SESSION_ID": "s", "ANTHROPIC_API_KEY": "", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}, false},
		{"proxy url without proxy key", map[string]string{"ANTHROPIC_API_KEY": "direct"}, proxy,
			map[string]string{"SESSION_ID": "s", "ANTHROPIC_API_KEY": "direct", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}, false},
		{"proxy url and key", map[string]string{"LLM_PROXY_API_KEY": "pk", "ANTHROPIC_API_KEY": "direct", "ANTHROPIC_BASE_URL": "https://evil"}, proxy,
			map[string]string{"SESSION_ID": "s", "ANTHROPIC_API_KEY": "pk", "ANTHROPIC_BASE_URL": proxy, "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}, true},
		{"extra copied", map[string]string{"FOO": "bar"}, "",
			map[string]string{"SESSION_ID": "s", "ANTHROPIC_API_KEY": "", "FOO": "bar", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}, false},
		// Decided for every provider: the plugin switch cannot be overridden.
		{"user cannot re-enable default plugins", map[string]string{"OPENCODE_DISABLE_DEFAULT_PLUGINS": "false"}, "",
			map[string]string{"SESSION_ID": "s", "ANTHROPIC_API_KEY": "", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}, false},
		{"user SESSION_ID wins", map[string]string{"SESSION_ID": "mine"}, "",
			map[string]string{"SESSION_ID": "mine", "ANTHROPIC_API_KEY": "", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PrepareSandboxEnv("s", tt.envVars, tt.proxyURL)
			if diff := cmp.Diff(tt.want, got.Env); diff != "" {
				t.Errorf("PrepareSandboxEnv env mismatch (-want +got):\n%s", diff)
			}
			if got.ProxyMode() != tt.wantProxy {
				t.Errorf("ProxyMode() = %v, want %v", got.ProxyMode(), tt.wantProxy)
			}
		})
	}
	t.Run("env profile drops proxy credentials", func(t *testing.T) {
		e := PrepareSandboxEnv("s", map[string]string{"LLM_PROXY_API_KEY": "pk", "FOO": "1"}, proxy)
		want := map[string]string{"SESSION_ID": "s", "FOO": "1", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true"}
		if diff := cmp.Diff(want, e.EnvProfile()); diff != "" {
			t.Errorf("EnvProfile mismatch (-want +got):\n%s", diff)
		}
	})
}

func TestMergeEnvFile(t *testing.T) {
	tests := []struct {
		name, existing string
		add            map[string]string
		want           map[string]string
	}{
		{"missing", "", map[string]string{"A": "1"}, map[string]string{"A": "1"}},
		{"blank", "  \n", map[string]string{"A": "1"}, map[string]string{"A": "1"}},
		{"merge new wins", `{"A":"0","B":"2"}`, map[string]string{"A": "1"}, map[string]string{"A": "1", "B": "2"}},
		{"invalid json replaced", `{not json`, map[string]string{"A": "1"}, map[string]string{"A": "1"}},
		{"json null", `null`, map[string]string{"A": "1"}, map[string]string{"A": "1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got map[string]string
			if err := json.Unmarshal(MergeEnvFile([]byte(tt.existing), tt.add), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MergeEnvFile(%q) mismatch (-want +got):\n%s", tt.existing, diff)
			}
		})
	}
}

func TestLoadHostSettings(t *testing.T) {
	env := map[string]string{"DEFAULT_SANDBOX_PROVIDER": "e2b", "SANDBOX_GIT_PULL_ON_RESTORE": "true",
		"SANDBOX_GIT_PULL_CADENCE_SECONDS": "300", "LLM_PROXY_URL": "http://p/"}
	got := LoadHostSettings(func(k string) string { return env[k] })
	want := HostSettings{DefaultProvider: KindE2B, SandboxTimeout: DefaultSandboxTimeout, GitPullOnRestore: true,
		GitPullCadenceSeconds: 300, ImageVersion: DefaultImageVersion, LLMProxyBaseURL: "http://p/v1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("LoadHostSettings mismatch (-want +got):\n%s", diff)
	}
}

// A path IsValidTargetPath accepts never leaves the workspace once joined to it.
func FuzzIsValidTargetPath(f *testing.F) {
	for _, s := range []string{".env", "../x", "a/../../b", "./.env", "..foo", `\..\x`, "a:b", "/abs", " ./a "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, ok := NormalizeSecretPath(p)
		if !ok {
			return
		}
		const ws = "/home/user/workspace"
		joined := path.Join(ws, rel)
		if joined != ws && !strings.HasPrefix(joined, ws+"/") {
			t.Errorf("NormalizeSecretPath(%q) = %q accepted, but joins to %q", p, rel, joined)
		}
	})
}
