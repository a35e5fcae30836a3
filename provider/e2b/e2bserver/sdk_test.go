package e2bserver_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
)

// TestOfficialJSSDK runs testdata/js/sdk.mjs, which uses the official E2B JS SDK
// (npm e2b, pinned with package-lock.json), against the server. It needs node and
// npm; `npm ci` installs the SDK from the lock file on first run.
func TestOfficialJSSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the official E2B JS SDK test needs node >= 20 and npm")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the official E2B JS SDK test needs node >= 20 and npm")
	}
	dir, err := filepath.Abs("testdata/js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err != nil {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		ci := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
		ci.Dir = dir
		if out, err := ci.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	srv, _ := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sdk.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_KEY="+e2btest.APIKey, "E2B_API_URL="+srv.URL,
		"E2B_SANDBOX_URL="+srv.URL, "E2B_DOMAIN=localhost", "E2B_DEBUG=false")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node sdk.mjs: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	var got struct {
		Steps []map[string]any `json:"steps"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("decode %q: %v", out, err)
	}
	steps := map[string]map[string]any{}
	for _, s := range got.Steps {
		steps[s["name"].(string)] = s
	}
	id := steps["create"]["sandboxId"]
	want := map[string]map[string]any{
		"create":  {"name": "create", "sandboxId": id},
		"run":     {"name": "run", "exitCode": 0.0, "stdout": "one\ntwo\n", "stderr": "warn\n", "chunks": []any{"one\n", "two\n"}},
		"read":    {"name": "read", "content": "written by the js sdk"},
		"fail":    {"name": "fail", "exitCode": 7.0, "error": "CommandExitError"},
		"paused":  {"name": "paused", "state": "paused"},
		"connect": {"name": "connect", "sandboxId": id, "content": "written by the js sdk"},
		"list":    {"name": "list", "ids": []any{id}, "states": []any{"running"}},
		"kill":    {"name": "kill", "running": false},
	}
	if diff := cmp.Diff(want, steps); diff != "" {
		t.Errorf("JS SDK steps (-want +got):\n%s\nstderr: %s", diff, stderr.String())
	}
}
