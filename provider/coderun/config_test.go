package coderun

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

const issueConfig = `
[other]
x = 1

[sandbox]
enabled = true
provider = "local"
mode = "lazy"
volume_ttl_minutes = 30
volume_capacity_mb = 300
timeout_seconds = 300
memory_mb = 1280

[[sandbox.dependencies]]
package = "@linear/sdk"
docs = ["https://linear.app/developers/sdk.md"]
secret_env = "LINEAR_API_KEY"
hosts = ["api.linear.app"]
`

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParse(t *testing.T) {
	c, err := Parse([]byte(issueConfig), env(map[string]string{"LINEAR_API_KEY": "lin_api_k3y0123456789abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Enabled: true, Provider: "local", Mode: "lazy", VolumeTTL: 30 * time.Minute, VolumeCapacityMB: 300,
		Timeout: 300 * time.Second, MemoryMB: 1280, Dependencies: []Dependency{{Package: "@linear/sdk", Version: "latest",
			Docs: []string{"https://linear.app/developers/sdk.md"}, SecretEnv: "LINEAR_API_KEY", Secret: "lin_api_k3y0123456789abcdef", Hosts: []string{"api.linear.app"}}}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	if got := c.AllowedHosts(); !cmp.Equal(got, []string{"api.linear.app"}) {
		t.Errorf("AllowedHosts = %q", got)
	}
	// Without the secret, its hosts are closed.
	c2, _ := Parse([]byte(issueConfig), env(nil))
	if got := c2.AllowedHosts(); len(got) != 0 {
		t.Errorf("AllowedHosts without the secret = %q, want none", got)
	}
}

func TestParseOffAndDefaults(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want Config
	}{
		{"empty document", "", Config{}},
		{"no sandbox section", "[model]\nname = 'x'\n", Config{}},
		{"disabled", "[sandbox]\nenabled = false\nmemory_mb = -1\n", Config{}},
		{"defaults", "[sandbox]\nenabled = true\n", Config{Enabled: true, Provider: "local", Mode: "lazy", VolumeTTL: DefaultVolumeTTL,
			VolumeCapacityMB: DefaultVolumeCapacityMB, Timeout: DefaultTimeout, MemoryMB: DefaultMemoryMB}},
		{"the seed's keys", "[sandbox]\nenabled = true\nprovider = 'deno'\nregion = 'ord'\n", Config{Enabled: true, Provider: "local", Region: "ord",
			Mode: "lazy", VolumeTTL: DefaultVolumeTTL, VolumeCapacityMB: DefaultVolumeCapacityMB, Timeout: DefaultTimeout, MemoryMB: DefaultMemoryMB}},
		{"an image", "[sandbox]\nenabled = true\nimage = 'registry.test/base:1'\n", Config{Enabled: true, Provider: "local", Mode: "lazy",
			Image: "registry.test/base:1", VolumeTTL: DefaultVolumeTTL, VolumeCapacityMB: DefaultVolumeCapacityMB, Timeout: DefaultTimeout, MemoryMB: DefaultMemoryMB}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.toml), env(nil))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.toml, diff)
			}
			if tt.want.Enabled == false && got.PromptAddendum() != "" {
				t.Errorf("PromptAddendum of an off config = %q", got.PromptAddendum())
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	dep := func(s string) string { return "[sandbox]\nenabled = true\n[[sandbox.dependencies]]\n" + s }
	tests := []struct{ name, toml, want string }{
		{"bad toml", "[sandbox\n", "parse sandbox config"},
		{"unknown key", "[sandbox]\nenabled = true\ntimeout = 3\n", `unknown key "sandbox.timeout"`},
		{"provider", "[sandbox]\nenabled = true\nprovider = 'aws'\n", `provider "aws"`},
		{"mode", "[sandbox]\nenabled = true\nmode = 'hot'\n", `mode "hot"`},
		{"ttl", "[sandbox]\nenabled = true\nvolume_ttl_minutes = 0\n", "volume_ttl_minutes = 0: must be positive"},
		{"timeout", "[sandbox]\nenabled = true\ntimeout_seconds = -5\n", "timeout_seconds = -5"},
		{"capacity small", "[sandbox]\nenabled = true\nvolume_capacity_mb = 8\n", "volume_capacity_mb = 8: want 16..1048576"},
		{"capacity large", "[sandbox]\nenabled = true\nvolume_capacity_mb = 2000000\n", "volume_capacity_mb = 2000000: want 16..1048576"},
		{"memory small", "[sandbox]\nenabled = true\nmemory_mb = 64\n", "memory_mb = 64: at least 128"},
		{"type", "[sandbox]\nenabled = true\nmemory_mb = 'lots'\n", "parse sandbox config"},
		{"no package", dep("hosts = ['a.b']\n"), "package is required"},
		{"bad package", dep("package = 'Bad Name'\n"), `package "Bad Name" is not an npm package name`},
		{"dup package", dep("package = 'a'\n[[sandbox.dependencies]]\npackage = 'a'\n"), `"a" is listed twice`},
		{"bad version", dep("package = 'a'\nversion = 'git+https://x'\n"), "not an npm version"},
		{"docs scheme", dep("package = 'a'\ndocs = ['file:///etc/passwd']\n"), "docs URL"},
		{"docs path missing", dep("package = 'a'\ndocs = ['/nonexistent/coderun-docs']\n"), `docs path "/nonexistent/coderun-docs"`},
		{"region", "[sandbox]\nenabled = true\nregion = 'US East'\n", `region "US East"`},
		{"secret env", dep("package = 'a'\nsecret_env = 'A-B'\n"), `secret_env "A-B"`},
		{"host with scheme", dep("package = 'a'\nhosts = ['https://api.x.com']\n"), `host "https://api.x.com"`},
		{"host with port", dep("package = 'a'\nhosts = ['api.x.com:443']\n"), "without scheme or port"},
		{"embeddings", "[sandbox]\nenabled = true\n[sandbox.embeddings]\nurl = 'x'\n", "embeddings: url"},
		{"image with a space", "[sandbox]\nenabled = true\nimage = 'debian bookworm'\n", `image "debian bookworm"`},
		{"image flag-like", "[sandbox]\nenabled = true\nimage = '-x'\n", `image "-x"`},
		{"two errors at once", "[sandbox]\nenabled = true\nmode = 'x'\nprovider = 'y'\n", `provider "y"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml), env(nil))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.toml, err, tt.want)
			}
		})
	}
}

// TestParseSecrets: a secret_env needs hosts, and a value the egress proxy would
// refuse fails at load, the field named and the value never quoted.
func TestParseSecrets(t *testing.T) {
	dep := func(s string) string {
		return "[sandbox]\nenabled = true\n[[sandbox.dependencies]]\npackage = 'a'\n" + s
	}
	tests := []struct{ name, toml, value, want string }{
		{"no hosts", dep("secret_env = 'A_KEY'\n"), "sk-a-0123456789abcdef", `dependencies[0]: secret_env "A_KEY" without hosts`},
		{"no hosts, unset", dep("secret_env = 'A_KEY'\n"), "", `dependencies[0]: secret_env "A_KEY" without hosts`},
		{"short value", dep("secret_env = 'A_KEY'\nhosts = ['api.a.test']\n"), "short-val", `secret_env A_KEY: secrets[0]: value of "A_KEY": shorter than 12 characters`},
		{"value not printable", dep("secret_env = 'A_KEY'\nhosts = ['api.a.test']\n"), "sk-a-0123456789\nabcdef", `value of "A_KEY": not printable ASCII`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.toml), env(map[string]string{"A_KEY": tt.value}))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.toml, err, tt.want)
			}
			if err != nil && tt.value != "" && strings.Contains(err.Error(), tt.value) {
				t.Errorf("Parse(%q) = %v: the error quotes the value", tt.toml, err)
			}
		})
	}
}

// TestConfigSecrets: one engine secret per secret_env that is set, with the hosts of
// every dependency that names it; an unset one is no secret and opens no host.
func TestConfigSecrets(t *testing.T) {
	c, err := Parse([]byte(`
[sandbox]
enabled = true
[[sandbox.dependencies]]
package = "b"
secret_env = "B_KEY"
hosts = ["api.b.test", "up.b.test"]
[[sandbox.dependencies]]
package = "a"
secret_env = "A_KEY"
hosts = ["api.a.test"]
[[sandbox.dependencies]]
package = "b-extra"
secret_env = "B_KEY"
hosts = ["api.b.test", "extra.b.test"]
[[sandbox.dependencies]]
package = "c"
secret_env = "C_KEY"
hosts = ["api.c.test"]
`), env(map[string]string{"A_KEY": "sk-a-0123456789abcdef", "B_KEY": "sk-b-0123456789abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	want := []engine.Secret{
		{Name: "A_KEY", Value: "sk-a-0123456789abcdef", Hosts: []string{"api.a.test"}},
		{Name: "B_KEY", Value: "sk-b-0123456789abcdef", Hosts: []string{"api.b.test", "extra.b.test", "up.b.test"}},
	}
	if diff := cmp.Diff(want, c.secrets()); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
	if got := c.secretNames(); !cmp.Equal(got, []string{"A_KEY", "B_KEY"}) {
		t.Errorf("secretNames = %q, want [A_KEY B_KEY]", got)
	}
	if got := c.AllowedHosts(); slices.Contains(got, "api.c.test") {
		t.Errorf("AllowedHosts = %q: the host of an unset secret is open", got)
	}
}

func TestSecretNeverPrints(t *testing.T) {
	c, err := Parse([]byte(issueConfig), env(map[string]string{"LINEAR_API_KEY": "lin_api_k3y0123456789abcdef"}))
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	slog.New(slog.NewTextHandler(&log, nil)).Info("config", "config", c, "dep", c.Dependencies[0], "secret", c.Dependencies[0].Secret)
	j, _ := json.Marshal(c)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%+v %#v", c, c), string(j), log.String()} {
		if strings.Contains(s, "lin_api_k3y0123456789abcdef") {
			t.Errorf("the secret shows in %q", s)
		}
	}
	if c.Dependencies[0].Secret.Value() != "lin_api_k3y0123456789abcdef" {
		t.Error("Value lost the secret")
	}
}

func TestPromptAddendum(t *testing.T) {
	c, _ := Parse([]byte(issueConfig), env(nil))
	p := c.PromptAddendum()
	lines := strings.Split(strings.TrimSpace(p), "\n")
	if len(lines) < 4 || len(lines) > 6 {
		t.Errorf("addendum has %d lines, want about 5:\n%s", len(lines), p)
	}
	for _, w := range []string{"@linear/sdk", "search_docs", "run_code", "/workspace", "save_code_modules"} {
		if !strings.Contains(p, w) {
			t.Errorf("addendum lacks %q:\n%s", w, p)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(issueConfig))
	f.Add([]byte("[sandbox]\nenabled = true\n[[sandbox.dependencies]]\npackage = '@a/b'\nhosts = ['*.x.io']\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, env(map[string]string{"K": "v"}))
		if err != nil {
			return
		}
		if c.Enabled && (c.MemoryMB < 128 || c.Timeout <= 0 || c.VolumeTTL <= 0 || int64(c.VolumeCapacityMB)<<20 < rules.MinVolumeBytes) {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
		if !c.Enabled && c.PromptAddendum() != "" {
			t.Fatal("off config has an addendum")
		}
	})
}

func TestParseOutputKeys(t *testing.T) {
	tests := []struct {
		toml      string
		budget    int
		typecheck bool
		err       string
	}{
		{"", 16 << 10, false, ""},
		{"output_budget_kb = 4\ntypecheck = true\n", 4 << 10, true, ""},
		{"output_budget_kb = 1024\n", 1 << 20, false, ""},
		{"output_budget_kb = 0\n", 0, false, "output_budget_kb = 0: must be positive"},
		{"output_budget_kb = 2048\n", 0, false, "output_budget_kb = 2048: at most 1024"},
		{"typecheck = 'yes'\n", 0, false, "parse sandbox config"},
	}
	for _, tt := range tests {
		c, err := Parse([]byte("[sandbox]\nenabled = true\n"+tt.toml), env(nil))
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Parse(%q) = %v, want an error containing %q", tt.toml, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.toml, err)
		}
		if c.outputBudget() != tt.budget || c.Typecheck != tt.typecheck {
			t.Errorf("Parse(%q): budget %d typecheck %v, want %d %v", tt.toml, c.outputBudget(), c.Typecheck, tt.budget, tt.typecheck)
		}
	}
}
