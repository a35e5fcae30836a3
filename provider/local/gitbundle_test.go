package local

import (
	"bytes"
	"context"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// inSandbox runs a bash command inside the sandbox and returns its output.
func inSandbox(t *testing.T, p *testProvider, id, command string) string {
	t.Helper()
	var out bytes.Buffer
	code, err := p.Engine().Exec(t.Context(), id, engine.ExecRequest{Argv: []string{"bash", "-c", command}, Stdout: &out, Stderr: &out})
	if err != nil || code != 0 {
		t.Fatalf("in sandbox: %s: exit %d, %v\n%s", command, code, err, out.String())
	}
	return strings.TrimSpace(out.String())
}

// Acceptance of issue 17 on the local engine: a sandbox made from a private repo
// (the remote demands the token) holds the token nowhere; the agent commits; the
// host pushes to session/<id>; the remote advances and sync brings origin/main
// up to date, still without a token inside.
// It runs on each root kind: on the image, git is the image's, not the host's.
func TestTokenlessSandboxPushAndSync(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testTokenless(t, k) })
	}
}

func testTokenless(t *testing.T, k rootKind) {
	const token = "ghs_e2e_tokenless_7d1f"
	srv := gittest.New(t, token)
	url := srv.CreateRepo(t, "app", map[string]string{"README.md": "private\n"})
	p := k.provider(t, nil)
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "sess-e2e", Branch: "main",
		Repos: []provider.RepoSpec{{RepoURL: url, Token: token, WorkspacePath: "app"}}})
	if err != nil {
		t.Fatalf("Boot: %v (%+v)", err, b.Report)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "sess-e2e", b.SandboxID) })
	if b.Plan.GitMode != provider.GitModeBundle {
		t.Errorf("plan git mode %q, want bundle", b.Plan.GitMode)
	}
	if r := report(b)["clone app"]; r.Status != provider.StepOK {
		t.Fatalf("clone app: %+v", r)
	}
	id := b.SandboxID
	if k.image {
		k.check(t, p.eng, id, p.o.Image)
	}
	repo := b.Paths.RepoDir("app")
	if got := inSandbox(t, p, id, "git -C "+repo+" remote get-url origin"); got != url {
		t.Errorf("origin = %q, want the plain URL %q", got, url)
	}
	inSandbox(t, p, id, "cd "+repo+" && echo 'agent work' > work.txt && git add -A && "+
		"git -c user.name=agent -c user.email=agent@example.com commit -q -m 'agent work'")
	head := inSandbox(t, p, id, "git -C "+repo+" rev-parse HEAD")

	// No process environment, no file under home, tmp or git config holds the token.
	env := inSandbox(t, p, id, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; true")
	if !strings.Contains(env, "SANDBOX_MCP_AUTH_TOKEN=") {
		t.Errorf("the environments read in the sandbox lack the sidecar's; the check sees nothing:\n%.500s", env)
	}
	if strings.Contains(env, token) {
		t.Error("a process environment in the sandbox holds the token")
	}
	if out := inSandbox(t, p, id, "grep -rlF "+token+" "+b.Paths.Home+" "+b.Paths.Tmp+" 2>/dev/null; git -C "+repo+" config --list --show-origin | grep -F "+token+"; true"); out != "" {
		t.Errorf("files in the sandbox hold the token: %s", out)
	}
	for _, dir := range []string{b.Home, hostPath(b, b.Paths.Tmp)} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(token)) {
					t.Errorf("%s holds the token", p)
				}
			}
			return nil
		})
	}

	// The host pushes the agent's branch through the sidecar.
	u, tok, err := p.Sidecar(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sidecar.New(sidecar.Options{BaseURL: u, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	m, err := gitpush.New(gitpush.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	repoID := base64.StdEncoding.EncodeToString([]byte(repo))
	remote := gitpush.Remote{URL: url, Token: token}
	res, err := m.PushSandbox(t.Context(), sc, repoID, remote, "sess-e2e")
	if err != nil {
		t.Fatalf("PushSandbox: %v", err)
	}
	if res.SHA != head || srv.Rev(t, "app", "refs/heads/session/sess-e2e") != head {
		t.Fatalf("push %+v; remote session/sess-e2e = %q, want %s", res, srv.Rev(t, "app", "refs/heads/session/sess-e2e"), head)
	}
	if got := strings.TrimSpace(gittest.Git(t, srv.Dir("app"), "show", "session/sess-e2e:work.txt")); got != "agent work" {
		t.Errorf("remote work.txt = %q", got)
	}

	// Sync: the remote advances; the sandbox's origin/main follows, its main stays.
	upstream := srv.Commit(t, "app", "main", "upstream", map[string]string{"up.txt": "up\n"})
	sr, err := m.SyncSandbox(t.Context(), sc, repoID, remote)
	if err != nil {
		t.Fatalf("SyncSandbox: %v", err)
	}
	if got := inSandbox(t, p, id, "git -C "+repo+" rev-parse origin/main"); got != upstream || sr.SHA != upstream {
		t.Errorf("sandbox origin/main = %s (sync %+v), want %s", got, sr, upstream)
	}
	if got := inSandbox(t, p, id, "git -C "+repo+" rev-parse main"); got != head {
		t.Errorf("sandbox main moved to %s", got)
	}
	if env := inSandbox(t, p, id, "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; true"); strings.Contains(env, token) {
		t.Error("the token reached a process environment during push or sync")
	}
	if out := inSandbox(t, p, id, "grep -rlF "+token+" "+b.Paths.Home+" "+b.Paths.Tmp+" 2>/dev/null; true"); out != "" {
		t.Errorf("the token reached files during push or sync: %s", out)
	}
}

// A bundle clone into the workspace itself, which the image owns by the sandbox user
// while the plan runs as root: the clone step's git still works (safe.directory), and
// origin is the plain URL.
func TestBundleCloneIntoUserOwnedWorkspace(t *testing.T) {
	const token = "ghs_e2e_tokenless_ws_2c9a"
	srv := gittest.New(t, token)
	url := srv.CreateRepo(t, "app", map[string]string{"README.md": "private\n"})
	k := rootKinds[1]
	p := k.provider(t, nil)
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s", Branch: "main",
		Repos: []provider.RepoSpec{{RepoURL: url, Token: token, WorkspacePath: "."}}})
	if err != nil {
		t.Fatalf("Boot: %v (%+v)", err, b.Report)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	k.check(t, p.eng, b.SandboxID, p.o.Image)
	if out := inSandbox(t, p, b.SandboxID, "stat -c %u "+b.Paths.Workspace()); out != "1000" {
		t.Fatalf("the image's workspace belongs to %s, want the user (1000): the test checks nothing", out)
	}
	if r := report(b)["clone ."]; r.Status != provider.StepOK {
		t.Fatalf("clone .: %+v", r)
	}
	cfg, err := p.eng.ReadFile(t.Context(), b.SandboxID, b.Paths.Workspace()+"/.git/config")
	if err != nil || !strings.Contains(string(cfg), "url = "+url+"\n") || strings.Contains(string(cfg), token) {
		t.Errorf(".git/config = %q, %v; want origin %s without the token", cfg, err, url)
	}
}
