package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
)

// TestServeModal: `sandboxctl serve --protocol modal` over the local engine, driven by
// `sandboxctl --provider modal` (Modal's Go SDK): create boots the platform's plan,
// exec, list, terminate; the server accepts only the token pair it printed.
func TestServeModal(t *testing.T) {
	requireNamespaces(t)
	bins := buildBinaries(t)
	dataDir := t.TempDir()
	env := map[string]string{"SANDBOXCTL_SANDBOX_MCP": filepath.Join(bins, "sandbox-mcp"),
		"SANDBOXCTL_PROLIFERATE": filepath.Join(bins, "proliferate"), "HOME": t.TempDir(),
		// The provider's base image has RUN steps; the host has what they install.
		modalserver.EnvSkipRunSteps: "1"}
	exported := serveModalCmd(t, dataDir, env)
	url := exported["MODAL_SERVER_URL"]
	if exported["MODAL_TUNNEL_CA"] != filepath.Join(dataDir, "modal-tunnel-ca.pem") || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("serve exported %q", exported)
	}
	// The pair is made at the first serve, kept 0600 in the data dir, and printed.
	tokFile := filepath.Join(dataDir, modalserver.TokenFile)
	if st, err := os.Stat(tokFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, %v; want mode 0600", tokFile, st, err)
	}
	if tok, _ := os.ReadFile(tokFile); !strings.Contains(string(tok), "MODAL_TOKEN_ID="+exported["MODAL_TOKEN_ID"]+"\n") ||
		!strings.HasPrefix(exported["MODAL_TOKEN_ID"], "ak-") || !strings.HasPrefix(exported["MODAL_TOKEN_SECRET"], "as-") {
		t.Errorf("printed pair %q/%q is not the kept one %q", exported["MODAL_TOKEN_ID"], exported["MODAL_TOKEN_SECRET"], tok)
	}

	t.Setenv("MODAL_SERVER_URL", url)
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	t.Setenv("MODAL_PROFILE", "")
	t.Setenv("MODAL_ENVIRONMENT", "")
	// Everything create needs is printed.
	if exported["MODAL_APP_NAME"] == "" {
		t.Errorf("serve exported %q, want MODAL_APP_NAME too", exported)
	}
	client := map[string]string{"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-y", "MODAL_APP_NAME": exported["MODAL_APP_NAME"],
		"MODAL_TUNNEL_CA": filepath.Join(dataDir, "modal-tunnel-ca.pem"), "HOME": env["HOME"]}
	sctl := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := run(t.Context(), append([]string{"--provider", "modal"}, args...), func(k string) string { return client[k] }, nil, &o, &e)
		return o.String(), e.String(), code
	}
	if _, e, code := sctl("list"); code == 0 || !strings.Contains(e, "Invalid token") {
		t.Errorf("list with a pair of our own = %d %q, want the server's refusal", code, e)
	}
	client["MODAL_TOKEN_ID"], client["MODAL_TOKEN_SECRET"] = exported["MODAL_TOKEN_ID"], exported["MODAL_TOKEN_SECRET"]
	if _, e, code := sctl("volume", "create", "v"); code != 0 {
		t.Fatalf("volume create = %d: %s", code, e)
	}
	// The create flags travel with the create: the volume is mounted and the memory
	// limit holds inside. It returns once the sidecar is healthy, not after a wait
	// for one it cannot reach.
	start := time.Now()
	o, e, code := sctl("create", "--session", "ctl-1", "--env", "SANDBOX_MCP_AUTH_TOKEN=tok", "--memory", "300M", "--volume", "v:/data")
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("create = %d: %s", code, e)
	}
	t.Logf("create took %v", took)
	if took >= provider.SidecarWaitTimeout {
		t.Errorf("create took %v: it waited out the sidecar wait (%v)", took, provider.SidecarWaitTimeout)
	}
	id := strings.TrimSpace(strings.Split(o, "\n")[0])
	if !strings.HasPrefix(id, "sb-") || !strings.Contains(o, "preview") || !strings.Contains(o, "https://127.0.0.1:") {
		t.Errorf("create printed %q", o)
	}
	if o, e, code := sctl("exec", id, "--", "sh", "-c", "echo kept > /data/f && grep -c ' /data ' /proc/self/mountinfo"); code != 0 || o != "1\n" {
		t.Errorf("exec on /data = %d %q %q, want the volume mounted there", code, o, e)
	}
	if _, e, code := sctl("exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=16M", "count=1"); code != 0 {
		t.Errorf("16M under a 300M limit = %d %q, want 0", code, e)
	}
	if _, e, code := sctl("exec", id, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=350M", "count=1"); code != 137 {
		t.Errorf("350M under a 300M limit = %d %q, want 137 (killed)", code, e)
	}
	// The sandbox's own CLI reaches its sidecar; the user gets its URL and token.
	if o, e, code := sctl("exec", id, "--", "proliferate", "services", "list"); code != 0 || !strings.Contains(o, `"services"`) {
		t.Errorf("exec proliferate services list = %d %q %q", code, o, e)
	}
	if o, e, code := sctl("--json", "url", id); code != 0 || !strings.Contains(o, `"token": "tok"`) || !strings.Contains(o, `"url": "https://127.0.0.1:`) {
		t.Errorf("url = %d %q %q, want the tunnel's URL and the token", code, o, e)
	}
	// What Modal cannot do is refused, naming the flag and the provider.
	if _, e, code := sctl("create", "--session", "ctl-2", "--pids", "10"); code == 0 || !strings.Contains(e, "--pids") || !strings.Contains(e, "modal") {
		t.Errorf("create --pids = %d %q, want a refusal naming --pids and modal", code, e)
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
	if _, e, code := sctl("volume", "rm", "v"); code != 0 {
		t.Errorf("volume rm = %d: %s", code, e)
	}
}

// serveModalCmd runs `sandboxctl serve --protocol modal` on dataDir with env until the
// test ends, and returns the variables it exported.
func serveModalCmd(t *testing.T, dataDir string, env map[string]string) map[string]string {
	return runExporting(t, []string{"serve", "--protocol", "modal", "--addr", "127.0.0.1:0", "--data-dir", dataDir}, env, "MODAL_TUNNEL_CA")
}

// TestServeModalBuild: `sandboxctl serve --protocol modal` builds an image with a RUN
// step (Modal's Go SDK: fromRegistry("debian:bookworm-slim").dockerfileCommands) into
// the data dir's image store, its base the Debian one, and the sandbox boots from it and
// sees what the step made. The data dir's store is the tests' shared one (a symlink),
// so the Debian base is built once per machine.
func TestServeModalBuild(t *testing.T) {
	requireNamespaces(t)
	s, _ := imagetest.Base(t)
	bins := buildBinaries(t)
	dataDir := t.TempDir()
	if err := os.Symlink(filepath.Join(imagetest.Dir(), "store"), filepath.Join(dataDir, "images")); err != nil {
		t.Fatal(err)
	}
	exported := serveModalCmd(t, dataDir, map[string]string{"SANDBOXCTL_SANDBOX_MCP": filepath.Join(bins, "sandbox-mcp"),
		"SANDBOXCTL_PROLIFERATE": filepath.Join(bins, "proliferate"), "HOME": t.TempDir()})
	for k, v := range map[string]string{"MODAL_SERVER_URL": exported["MODAL_SERVER_URL"], "MODAL_TOKEN_ID": exported["MODAL_TOKEN_ID"],
		"MODAL_TOKEN_SECRET": exported["MODAL_TOKEN_SECRET"], "MODAL_CONFIG_PATH": filepath.Join(t.TempDir(), "none.toml"),
		"MODAL_PROFILE": "", "MODAL_ENVIRONMENT": ""} {
		t.Setenv(k, v)
	}
	c, err := modal.NewClientWithOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "build", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	uniq := strconv.FormatInt(time.Now().UnixNano(), 36) // a real build each run: the store is shared
	img := c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands([]string{"RUN echo built-" + uniq + " > /built"}, nil)
	sb, err := c.Sandboxes.Create(ctx, app, img, nil)
	if err != nil {
		t.Fatalf("Create from an image with a RUN step: %v", err)
	}
	defer removeBuilt(t, s, dataDir)
	defer sb.Terminate(context.WithoutCancel(ctx), nil)
	p, err := sb.Exec(ctx, []string{"cat", "/built"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p.Stdout)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(ctx, nil); err != nil || code != 0 || string(out) != "built-"+uniq+"\n" {
		t.Errorf("cat /built = %q, %d, %v; want what the RUN step wrote", out, code, err)
	}
}

// removeBuilt removes from s the images the server in dataDir built (its state file).
func removeBuilt(t *testing.T, s *store.Store, dataDir string) {
	data, err := os.ReadFile(filepath.Join(dataDir, "modal-images.json"))
	if err != nil {
		t.Errorf("the server kept no images: %v", err)
		return
	}
	var recs []struct{ Built string }
	if err := json.Unmarshal(data, &recs); err != nil {
		t.Error(err)
	}
	for _, r := range recs {
		if r.Built != "" {
			if _, err := s.Remove(context.Background(), r.Built); err != nil {
				t.Logf("remove image %s: %v", r.Built, err)
			}
		}
	}
}
