package provider_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// TestBootLLMKeyIsAPlaceholder: the one provider on the local engine boots with an
// Anthropic key; inside, ANTHROPIC_API_KEY is a placeholder shaped like the key, the
// OpenCode configs carry no key, and the value is in nothing root can read (files,
// every process's environment and command line).
func TestBootLLMKeyIsAPlaceholder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local engine's isolation needs root")
	}
	bin := testutil.Commands(t, "sandbox-mcp")
	eng, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir(), SandboxMCP: path.Join(bin, "sandbox-mcp")})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	p, err := provider.New(eng, provider.Options{Kind: provider.KindLocal})
	if err != nil {
		t.Fatal(err)
	}
	value := "sk-ant-api03-" + rand.Text() + rand.Text()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b, err := p.Boot(ctx, provider.CreateOptions{SessionID: "llm-keys", EnvVars: map[string]string{provider.EnvAnthropicAPIKey: value}})
	if err != nil {
		t.Fatalf("Boot: %v\nreport: %+v", err, b.Report)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "llm-keys", b.SandboxID) })
	sh := func(env []string, script string) string {
		t.Helper()
		var out bytes.Buffer
		code, err := eng.Exec(ctx, b.SandboxID, engine.ExecRequest{Argv: []string{"sh", "-c", script}, Env: env,
			Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute})
		if err != nil || code != 0 {
			t.Fatalf("sh -c %q = %d, %v: %s", script, code, err, out.String())
		}
		return out.String()
	}
	ph := strings.TrimSpace(sh(nil, `printf '%s' "$ANTHROPIC_API_KEY"`))
	if ph == value || !strings.HasPrefix(ph, "sk-ant-api03-") || len(ph) != len(value) {
		t.Errorf("$ANTHROPIC_API_KEY = %q, want a placeholder shaped like the key", ph)
	}
	for _, f := range []string{b.Paths.GlobalOpencodeConfig(), path.Join(b.Plan.RepoDir, "opencode.json")} {
		got, err := eng.ReadFile(ctx, b.SandboxID, f)
		if err != nil {
			t.Errorf("read %s: %v", f, err)
		}
		if strings.Contains(string(got), value) || strings.Contains(string(got), ph) {
			t.Errorf("%s carries the key: %s", f, got)
		}
	}
	// The pattern matches the value without holding it, so the command line and the
	// environment of the search itself are no match.
	pattern := value[:8] + "[" + value[8:9] + "]" + value[9:]
	out := sh([]string{"P=" + pattern, "H=" + b.Paths.Home}, `grep -rlE "$P" "$H" /etc /root /home /tmp /run /var /usr/local /proc/[0-9]*/environ /proc/[0-9]*/cmdline 2>/dev/null; echo end`)
	if strings.TrimSpace(out) != "end" {
		t.Errorf("the key is readable inside at: %s", out)
	}
	if plan, _ := json.Marshal(b.Plan); strings.Contains(string(plan), value) {
		t.Error("the boot's plan holds the key")
	}
}
