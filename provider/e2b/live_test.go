package e2b_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// TestLiveE2B runs the client against real E2B when E2B_API_KEY is set (never in CI):
// create from E2B_TEMPLATE (default "base"), run a command, write and read a file,
// pause, connect, list and kill.
func TestLiveE2B(t *testing.T) {
	if os.Getenv(e2b.EnvAPIKey) == "" {
		t.Skip("E2B_API_KEY is not set: the live E2B test needs a real account")
	}
	c, err := e2b.NewClient(e2b.ClientOptionsFromEnv(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	template := os.Getenv(e2b.EnvTemplate)
	if template == "" {
		template = "base"
	}
	sb, err := c.Create(ctx, e2bwire.NewSandbox{TemplateID: template, Timeout: 120, Secure: true, Metadata: map[string]string{"test": "sandbox-mcp-live"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Kill(context.Background(), sb.SandboxID) })
	e := c.Envd(sb)
	r, err := e.Run(ctx, "echo live; echo err >&2", e2b.RunOptions{Timeout: time.Minute})
	if err != nil || r.ExitCode != 0 || r.Stdout != "live\n" || r.Stderr != "err\n" {
		t.Fatalf("run = %+v, %v", r, err)
	}
	if err := e.WriteFile(ctx, "/home/user/live.txt", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(ctx, sb.SandboxID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	again, err := c.Connect(ctx, sb.SandboxID, 2*time.Minute)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	got, err := c.Envd(again).ReadFile(ctx, "/home/user/live.txt")
	if err != nil || string(got) != "kept" {
		t.Errorf("file after pause and connect = %q, %v", got, err)
	}
	list, err := c.List(ctx, e2b.ListOptions{Metadata: map[string]string{"test": "sandbox-mcp-live"}})
	if err != nil || !strings.Contains(func() string {
		var ids []string
		for _, s := range list {
			ids = append(ids, s.SandboxID)
		}
		return strings.Join(ids, ",")
	}(), sb.SandboxID) {
		t.Errorf("list = %+v, %v, want %s", list, err, sb.SandboxID)
	}
	if err := c.Kill(ctx, sb.SandboxID); err != nil {
		t.Errorf("kill: %v", err)
	}
}
