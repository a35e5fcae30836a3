package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// TestPushAndSyncCommands drives `sandboxctl push` and `sandboxctl sync` on a
// tokenless local sandbox made from a private repo (the remote demands the token).
func TestPushAndSyncCommands(t *testing.T) {
	t.Parallel()
	const token = "ghs_sandboxctl_push_5e2a"
	bin := filepath.Join(testutil.Commands(t, "sandbox-mcp"), "sandbox-mcp")
	srv := gittest.New(t, token)
	url := srv.CreateRepo(t, "app", map[string]string{"README.md": "private\n"})
	dataDir := t.TempDir()
	env := map[string]string{"SANDBOXCTL_SANDBOX_MCP": bin, "GIT_TOKEN": token}
	ctl := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"--data-dir", dataDir}, args...), func(k string) string { return env[k] },
			strings.NewReader(""), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	// Created by sandboxctl from a private repo: the token stays on the host.
	code, out, errOut := ctl("create", "--repo", url, "--token-env", "GIT_TOKEN", "--session", "sess-ctl")
	if code != 0 {
		t.Fatalf("create = %d %q %q", code, out, errOut)
	}
	id, _, _ := strings.Cut(out, "\n")
	t.Cleanup(func() { ctl("terminate", id) })
	eng, err := local.NewEngine(local.EngineOptions{DataDir: dataDir, SandboxMCP: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	// The sidecar's URL and token, as a user finds them.
	code, out, errOut = ctl("--json", "url", id)
	var access sidecarAccess
	if code != 0 || json.Unmarshal([]byte(out), &access) != nil || access.URL == "" || access.Token == "" {
		t.Fatalf("url %s = %d %q %q, want the URL and token as JSON", id, code, out, errOut)
	}
	sc, err := sidecar.New(sidecar.Options{BaseURL: access.URL, Token: access.Token})
	if err != nil {
		t.Fatal(err)
	}
	repos, err := sc.GitRepos(t.Context())
	if err != nil || len(repos) != 1 {
		t.Fatalf("sandbox repos %+v, %v; want the one clone", repos, err)
	}
	repo := repos[0].Path
	home := filepath.Dir(filepath.Dir(repo)) // <home>/workspace/<repo>
	tmp := "/tmp"                            // the sandbox's own /tmp when isolated; unisolated, the host's (holding this test binary)
	if !eng.Capabilities().Isolated {
		tmp = ""
	}
	sh := func(command string) string {
		t.Helper()
		var out bytes.Buffer
		code, err := eng.Exec(t.Context(), id, engine.ExecRequest{Argv: []string{"bash", "-c", command}, Stdout: &out, Stderr: &out})
		if err != nil || code != 0 {
			t.Fatalf("in sandbox: %s: exit %d, %v\n%s", command, code, err, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	commit := "git -c user.name=agent -c user.email=agent@example.com commit -q -m"
	sh("cd " + repo + " && echo work > work.txt && git add -A && " + commit + " work")
	head := sh("git -C " + repo + " rev-parse HEAD")

	code, out, errOut = ctl("push", id, "--remote", url, "--token-env", "GIT_TOKEN")
	if code != 0 || !strings.Contains(out, "pushed "+head+" to refs/heads/session/sess-ctl") {
		t.Fatalf("push = %d %q %q", code, out, errOut)
	}
	if got := srv.Rev(t, "app", "refs/heads/session/sess-ctl"); got != head {
		t.Fatalf("remote session/sess-ctl = %q, want %s", got, head)
	}
	if got := srv.Rev(t, "app", "refs/heads/main"); got == head {
		t.Error("main was pushed")
	}

	// A refused push: exit 1, the reason on stderr, the remote unchanged.
	sh("cd " + repo + " && echo S=1 > .env && git add -A && " + commit + " secret")
	code, out, errOut = ctl("push", id, "--token-env", "GIT_TOKEN") // the recorded remote
	if code != 1 || !strings.Contains(errOut, "deny-glob") || !strings.Contains(errOut, `".env"`) {
		t.Errorf("push of a .env = %d %q %q, want exit 1 naming the rule", code, out, errOut)
	}
	if got := srv.Rev(t, "app", "refs/heads/session/sess-ctl"); got != head {
		t.Errorf("refused push moved the remote to %s", got)
	}

	// Sync: the remote advances; origin/main follows inside, without a token.
	// The sandbox points its origin at a listener of its choosing: the host
	// takes the remote from its own record, so the listener hears nothing.
	var evilHits atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evilHits.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="x"`)
		http.Error(w, "auth", http.StatusUnauthorized)
	}))
	t.Cleanup(evil.Close)
	sh("git -C " + repo + " remote set-url origin " + evil.URL + "/app.git")
	upstream := srv.Commit(t, "app", "main", "upstream", map[string]string{"up.txt": "up\n"})
	code, out, errOut = ctl("sync", id, "--token-env", "GIT_TOKEN")
	if code != 0 || !strings.Contains(out, "origin/main is now "+upstream) {
		t.Fatalf("sync = %d %q %q", code, out, errOut)
	}
	if got := sh("git -C " + repo + " rev-parse origin/main"); got != upstream {
		t.Errorf("sandbox origin/main = %s, want %s", got, upstream)
	}
	code, out, _ = ctl("sync", id, "--token-env", "GIT_TOKEN")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Errorf("second sync = %d %q", code, out)
	}
	if env := sh("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; true"); strings.Contains(env, token) {
		t.Error("a process environment in the sandbox holds the token after push and sync")
	}
	if files := sh("grep -rlF " + token + " " + home + " " + tmp + " 2>/dev/null; grep -rlF " + token + " " + repo + "/.git/config 2>/dev/null; true"); files != "" {
		t.Errorf("files in the sandbox hold the token: %s", files)
	}

	if n := evilHits.Load(); n != 0 {
		t.Errorf("the sandbox's rewritten origin was contacted %d times", n)
	}

	// Usage mistakes. Without the host's record, a push or sync needs --remote:
	// the sandbox's origin is never asked.
	rec := filepath.Join(dataDir, "git-repos", id+".json")
	if fi, err := os.Stat(rec); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the host's record of the repos: %v, %v; want a 0600 file", fi, err)
	}
	if data, _ := os.ReadFile(rec); !strings.Contains(string(data), url) || strings.Contains(string(data), token) {
		t.Errorf("record %s = %q, want the URL and no token", rec, data)
	}
	if err := os.Remove(rec); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"push", "sync"} {
		if code, _, errOut := ctl(verb, id, "--token-env", "GIT_TOKEN"); code != 2 || !strings.Contains(errOut, "give --remote") {
			t.Errorf("%s without a recorded remote = %d %q, want 2 asking for --remote", verb, code, errOut)
		}
	}
	if n := evilHits.Load(); n != 0 {
		t.Errorf("the sandbox's rewritten origin was contacted %d times", n)
	}
	if code, _, errOut := ctl("push", id, "--remote", url, "--token-env", "NOPE"); code != 1 || !strings.Contains(errOut, "NOPE") {
		t.Errorf("push with an unset token variable = %d %q", code, errOut)
	}
}
