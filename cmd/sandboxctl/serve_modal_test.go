package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// TestServeModal: `sandboxctl serve --protocol modal` over the local engine, driven by
// `sandboxctl --provider modal` (Modal's Go SDK): create boots the platform's plan,
// exec, list, terminate.
func TestServeModal(t *testing.T) {
	requireNamespaces(t)
	bins := buildBinaries(t)
	dataDir := t.TempDir()
	env := map[string]string{"SANDBOXCTL_SANDBOX_MCP": filepath.Join(bins, "sandbox-mcp"),
		"SANDBOXCTL_PROLIFERATE": filepath.Join(bins, "proliferate"), "HOME": t.TempDir()}
	getenv := func(k string) string { return env[k] }

	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut testutil.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--protocol", "modal", "--addr", "127.0.0.1:0", "--data-dir", dataDir}, getenv, nil, &out, &errOut)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d: %s", code, errOut.String())
		}
	}()
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == ""; time.Sleep(50 * time.Millisecond) {
		for _, line := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "MODAL_SERVER_URL="); ok {
				url = v
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve printed no MODAL_SERVER_URL: %q %q", out.String(), errOut.String())
		}
	}
	if !strings.Contains(out.String(), "MODAL_TUNNEL_CA="+filepath.Join(dataDir, "modal-tunnel-ca.pem")) {
		t.Errorf("serve output lacks the CA path: %q", out.String())
	}

	t.Setenv("MODAL_SERVER_URL", url)
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	t.Setenv("MODAL_PROFILE", "")
	t.Setenv("MODAL_ENVIRONMENT", "")
	client := map[string]string{"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-y", "MODAL_APP_NAME": "sandboxctl-test",
		"MODAL_TUNNEL_CA": filepath.Join(dataDir, "modal-tunnel-ca.pem"), "HOME": env["HOME"]}
	sctl := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := run(t.Context(), append([]string{"--provider", "modal"}, args...), func(k string) string { return client[k] }, nil, &o, &e)
		return o.String(), e.String(), code
	}
	o, e, code := sctl("create", "--session", "ctl-1", "--env", "SANDBOX_MCP_AUTH_TOKEN=tok")
	if code != 0 {
		t.Fatalf("create = %d: %s", code, e)
	}
	id := strings.TrimSpace(strings.Split(o, "\n")[0])
	if !strings.HasPrefix(id, "sb-") || !strings.Contains(o, "preview") || !strings.Contains(o, "https://127.0.0.1:") {
		t.Errorf("create printed %q", o)
	}
	if o, e, code := sctl("exec", id, "--", "sh", "-c", "echo hi from modal; exit 3"); code != 3 || o != "hi from modal\n" {
		t.Errorf("exec = %d %q %q", code, o, e)
	}
	if o, e, code := sctl("list"); code != 0 || !strings.Contains(o, id) {
		t.Errorf("list = %d %q %q", code, o, e)
	}
	if _, e, code := sctl("terminate", id); code != 0 {
		t.Errorf("terminate = %d: %s", code, e)
	}
	if o, _, _ := sctl("list"); strings.Contains(o, id) {
		t.Errorf("list after terminate still has %s: %q", id, o)
	}
}
