package modalserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestJSSDK runs Modal's official JS SDK (npm `modal`, pinned in testdata/js with its
// package-lock.json) against the server on the isolated local engine: create, exec
// echo, write+read a file, a tunnel to an HTTP server that node serves inside the
// sandbox (the host's node binary, seen through the sandbox's read-only view of the
// host's root), snapshot and create from its image id, list, terminate. It installs
// the SDK with `npm install --no-save` (from the npm registry) and is skipped only when
// node or npm is missing.
func TestJSSDK(t *testing.T) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the official JS SDK check needs node and npm", tool)
		}
	}
	dir, err := filepath.Abs("testdata/js")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "modal", "package.json")); err != nil {
		// npm install --no-save keeps the lock file's pins and leaves it as it is;
		// unlike npm ci it accepts a lock without the platform-specific optional
		// packages that some registries and npm configurations leave out.
		ci := exec.CommandContext(ctx, "npm", "install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts")
		ci.Dir = dir
		if out, err := ci.CombinedOutput(); err != nil {
			t.Fatalf("npm install: %v\n%s", err, out)
		}
	}

	eng := modaltest.Engine(t, local.EngineOptions{})
	url, srv := startServer(t, eng)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CACertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	node := exec.CommandContext(ctx, "node", "check.mjs")
	node.Dir = dir
	node.Env = append(append(os.Environ(), modaltest.SDKEnv(t, url)...), "MODAL_TOKEN_ID="+testToken.ID, "MODAL_TOKEN_SECRET="+testToken.Secret,
		"TUNNEL_PORT="+strconv.Itoa(tunnelPort), "NODE_EXTRA_CA_CERTS="+ca)
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node check.mjs: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	var got struct {
		OK                 bool
		Error              string
		SandboxID          string
		Stdout             string
		ExitCode           int
		ReadBack           string
		TunnelURL          string
		TunnelBody         string
		SnapshotImageID    string
		RestoredRead       string
		Listed             []string
		ExitAfterTerminate int
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("check.mjs printed %q: %v\nstderr: %s", out, err, stderr.String())
	}
	if !got.OK {
		t.Fatalf("JS SDK check failed: %s\nstderr: %s", got.Error, stderr.String())
	}
	if !strings.HasPrefix(got.SandboxID, "sb-") || got.Stdout != "hello yes\n" || got.ExitCode != 0 || got.ReadBack != "written from js\n" || got.TunnelBody != "js tunnel ok" {
		t.Errorf("JS SDK results = %+v", got)
	}
	if !strings.HasPrefix(got.SnapshotImageID, "im-") || got.RestoredRead != "written from js\n" {
		t.Errorf("JS SDK snapshot: image %q, restored file %q", got.SnapshotImageID, got.RestoredRead)
	}
	if len(got.Listed) != 2 || !slices.Contains(got.Listed, got.SandboxID) {
		t.Errorf("JS SDK list = %v, want the two running sandboxes incl. %s", got.Listed, got.SandboxID)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: srv.TLSConfig()}, Timeout: 10 * time.Second}
	// The sandbox is terminated, so its tunnel is closed: a GET must fail.
	if resp, err := hc.Get(got.TunnelURL); err == nil {
		resp.Body.Close()
		t.Errorf("tunnel %s still answers after terminate", got.TunnelURL)
	}
	if !strings.HasPrefix(got.TunnelURL, "https://127.0.0.1:") {
		t.Errorf("tunnel URL = %q, want https://127.0.0.1:PORT", got.TunnelURL)
	}
}
