package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// TestAloneCarriesTheSidecar: a sandboxctl binary alone in an empty directory, with
// neither sandbox-mcp nor proliferate on PATH, creates sandboxes whose sidecar
// answers its health: it binds itself in as both (a multi-call binary).
func TestAloneCarriesTheSidecar(t *testing.T) {
	t.Parallel()
	requireNamespaces(t)
	bin := filepath.Join(testutil.Commands(t, "sandboxctl"), "sandboxctl")
	path := "/usr/sbin:/usr/bin:/sbin:/bin" // mkfs.ext4 makes the disk of a sandbox
	for _, d := range filepath.SplitList(path) {
		for _, name := range []string{"sandbox-mcp", "proliferate"} {
			if _, err := os.Stat(filepath.Join(d, name)); err == nil {
				t.Skipf("%s is installed in %s: sandboxctl would bind that one", name, d)
			}
		}
	}
	for _, mode := range []string{"isolated", "unisolated"} {
		t.Run(mode, func(t *testing.T) {
			data := t.TempDir()
			t.Cleanup(func() { cleanupSandboxes(data) })
			ctl := func(args ...string) (string, string) {
				t.Helper()
				if mode == "unisolated" {
					args = append([]string{"--unisolated"}, args...)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir(), "SANDBOXCTL_DATA_DIR=" + data}
				var stdout, stderr strings.Builder
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("sandboxctl %q: %v\nstderr: %s", args, err, stderr.String())
				}
				return stdout.String(), stderr.String()
			}
			out, _ := ctl("--json", "create")
			var res provider.CreateResult
			if err := json.Unmarshal([]byte(out), &res); err != nil || res.SandboxID == "" || res.SandboxMCPURL == "" {
				t.Fatalf("create --json = %q, %v", out, err)
			}
			resp, err := http.Get(res.SandboxMCPURL + "/api/health")
			if err != nil {
				t.Fatalf("sidecar health: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("sidecar health = %s, want 200 OK", resp.Status)
			}
			if mode == "isolated" {
				// The CLI inside is sandboxctl too, acting as proliferate; a service it
				// starts runs under the sidecar's monitor, sandboxctl re-executed. It finds
				// its sidecar's token in the sandbox's environment.
				ctl("exec", res.SandboxID, "--", "proliferate", "services", "start", "--name", "alone", "--command", "sleep 60")
				if out, _ := ctl("exec", res.SandboxID, "--", "proliferate", "services", "list"); !strings.Contains(out, `"alone"`) ||
					!strings.Contains(out, "running") {
					t.Errorf("proliferate services list inside = %q, want the service alone running", out)
				}
			}
			ctl("terminate", res.SandboxID)
		})
	}
}
