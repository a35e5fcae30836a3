package gitctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/gitctl"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

const (
	session  = "s-7f3a"
	gitToken = "ghs_controllerOnlyToken123"
)

// git runs git for the test's own setup, with no ambient configuration.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// remote is a bare repository served by git http-backend over loopback,
// which requires the token and records every Authorization it saw.
type remote struct {
	bare string
	url  string
	mu   sync.Mutex
	auth []string
}

func (r *remote) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.auth...)
}

type env struct {
	ws     string
	remote *remote
	gate   *gitctl.Gate
	client *http.Client
}

func setup(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	seed := filepath.Join(dir, "seed")
	bare := filepath.Join(dir, "remote.git")
	ws := filepath.Join(dir, "workspace")
	git(t, dir, "init", "-q", "-b", "main", seed)
	os.WriteFile(filepath.Join(seed, "README.md"), []byte("hello\n"), 0o644)
	git(t, seed, "add", "README.md")
	git(t, seed, "commit", "-q", "-m", "first")
	git(t, dir, "clone", "-q", "--bare", seed, bare)
	git(t, bare, "config", "http.receivepack", "true")
	git(t, dir, "clone", "-q", bare, ws)

	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatal(err)
	}
	rem := &remote{bare: bare}
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Dir: dir,
		Env: []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		rem.mu.Lock()
		rem.auth = append(rem.auth, a)
		rem.mu.Unlock()
		if user, pass, ok := r.BasicAuth(); !ok || user != "x-access-token" || pass != gitToken {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "auth", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rem.url = srv.URL + "/remote.git"

	gate, err := gitctl.New(gitctl.Config{
		Workspace: ws, SessionID: session, Remote: gitctl.Remote{URL: rem.url, Token: gitToken},
		UserName: "Agent", UserEmail: "agent@example.invalid", Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's side reaches the gate over a unix socket, as on the shared volume.
	sock := filepath.Join(dir, "gate.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gate.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	t.Cleanup(client.CloseIdleConnections)
	return &env{ws: ws, remote: rem, gate: gate, client: client}
}

// call sends one request over the socket and returns the status and body.
func (e *env) call(t *testing.T, args ...string) (int, gitctl.Result, string) {
	t.Helper()
	body, _ := json.Marshal(gitctl.Request{Args: args})
	resp, err := e.client.Post("http://gate/v1/git", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	var res gitctl.Result
	json.Unmarshal(raw, &res)
	return resp.StatusCode, res, string(raw)
}

func (e *env) ok(t *testing.T, args ...string) gitctl.Result {
	t.Helper()
	status, res, raw := e.call(t, args...)
	if status != http.StatusOK || res.ExitCode != 0 {
		t.Fatalf("git %q = %d %s, want 200 exit 0", args, status, raw)
	}
	return res
}

func TestGateSessionFlow(t *testing.T) {
	e := setup(t)
	os.WriteFile(filepath.Join(e.ws, "app.go"), []byte("package app\n"), 0o644)
	if res := e.ok(t, "status", "--porcelain"); !strings.Contains(res.Stdout, "?? app.go") {
		t.Errorf("status = %q, want app.go untracked", res.Stdout)
	}
	e.ok(t, "add", "app.go")
	if res := e.ok(t, "diff", "--cached", "--name-only"); strings.TrimSpace(res.Stdout) != "app.go" {
		t.Errorf("diff --cached --name-only = %q, want app.go", res.Stdout)
	}
	e.ok(t, "commit", "-m", "add app")
	if res := e.ok(t, "log", "--oneline", "-n", "1"); !strings.Contains(res.Stdout, "add app") {
		t.Errorf("log = %q, want the new commit", res.Stdout)
	}
	head := git(t, e.ws, "rev-parse", "HEAD")
	mainBefore := git(t, e.remote.bare, "rev-parse", "refs/heads/main")

	e.ok(t, "push", "origin", "HEAD:refs/heads/session/"+session)
	if got := git(t, e.remote.bare, "rev-parse", "refs/heads/session/"+session); got != head {
		t.Errorf("remote session/%s = %s, want %s", session, got, head)
	}
	if got := git(t, e.remote.bare, "rev-parse", "refs/heads/main"); got != mainBefore {
		t.Errorf("remote main moved to %s, want %s", got, mainBefore)
	}
	e.ok(t, "fetch")
	if got := git(t, e.ws, "rev-parse", "refs/remotes/origin/session/"+session); got != head {
		t.Errorf("fetched origin/session/%s = %s, want %s", session, got, head)
	}
	var authed bool
	for _, a := range e.remote.seen() {
		authed = authed || strings.HasPrefix(a, "Basic ")
	}
	if !authed {
		t.Error("the remote never saw the controller's credential")
	}
	// The credential is nowhere in the workspace.
	filepath.WalkDir(e.ws, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte(gitToken)) {
			t.Errorf("%s holds the git token", p)
		}
		return nil
	})
	// The lock file lies in the shared git directory.
	if _, err := os.Stat(filepath.Join(e.ws, ".git", rules.BastionGitLockFile)); err != nil {
		t.Errorf("lock file: %v", err)
	}
}

func TestGateDenies(t *testing.T) {
	e := setup(t)
	os.WriteFile(filepath.Join(e.ws, "x.txt"), []byte("x\n"), 0o644)
	e.ok(t, "add", "x.txt")
	e.ok(t, "commit", "-m", "x")
	refsBefore := git(t, e.remote.bare, "for-each-ref")
	cases := []struct {
		name string
		args []string
	}{
		{"push main", []string{"push", "origin", "HEAD:refs/heads/main"}},
		{"push main short", []string{"push", "origin", "HEAD:main"}},
		{"push force flag", []string{"push", "--force", "origin", "HEAD:refs/heads/session/" + session}},
		{"push force refspec", []string{"push", "origin", "+HEAD:refs/heads/session/" + session}},
		{"push other session", []string{"push", "origin", "HEAD:refs/heads/session/other"}},
		{"push other remote", []string{"push", "http://127.0.0.1:1/x.git", "HEAD:refs/heads/session/" + session}},
		{"push receive-pack", []string{"push", "--receive-pack=touch /tmp/pwn", "origin", "HEAD:refs/heads/session/" + session}},
		{"push all", []string{"push", "--all"}},
		{"push delete", []string{"push", "origin", ":refs/heads/main"}},
		{"config", []string{"config", "core.hooksPath", "/tmp"}},
		{"remote add", []string{"remote", "add", "evil", "http://127.0.0.1:1/x.git"}},
		{"global -c", []string{"-c", "core.hooksPath=/tmp", "status"}},
		{"global -C", []string{"-C", "/", "status"}},
		{"git-dir", []string{"--git-dir=/etc", "status"}},
		{"work-tree", []string{"--work-tree=/", "status"}},
		{"checkout", []string{"checkout", "main"}},
		{"reset", []string{"reset", "--hard"}},
		{"fetch upload-pack", []string{"fetch", "--upload-pack=touch /tmp/pwn", "origin"}},
		{"fetch other url", []string{"fetch", "http://127.0.0.1:1/x.git"}},
		{"diff output", []string{"diff", "--output=/tmp/out"}},
		{"diff ext", []string{"diff", "--ext-diff"}},
		{"diff textconv", []string{"diff", "--textconv"}},
		{"diff no-index", []string{"diff", "--no-index", "/etc/passwd", "x.txt"}},
		{"log exec-like", []string{"log", "--exec=sh"}},
		{"log output", []string{"log", "--output=/tmp/x"}},
		{"commit file", []string{"commit", "-F", "/etc/passwd"}},
		{"commit template", []string{"commit", "--template=/etc/passwd", "-m", "x"}},
		{"commit editor", []string{"commit"}},
		{"commit amend", []string{"commit", "--amend", "-m", "x"}},
		{"add outside", []string{"add", "../outside"}},
		{"add absolute", []string{"add", "/etc/passwd"}},
		{"add git dir", []string{"add", ".git/config"}},
		{"diff path outside", []string{"diff", "--", "../x"}},
		{"empty", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, _, raw := e.call(t, tc.args...)
			if status != http.StatusForbidden || !strings.Contains(raw, "denied") {
				t.Errorf("git %q = %d %s, want 403 denied", tc.args, status, raw)
			}
		})
	}
	if got := git(t, e.remote.bare, "for-each-ref"); got != refsBefore {
		t.Errorf("remote refs changed by denied commands:\n%s\nwant\n%s", got, refsBefore)
	}
	if _, err := os.Stat("/tmp/pwn"); err == nil {
		t.Error("/tmp/pwn exists: a denied option ran a program")
	}
}

// A hook in the shared .git/hooks must never run on the controller.
func TestGateHooksNeverRun(t *testing.T) {
	e := setup(t)
	marker := filepath.Join(t.TempDir(), "hook-ran")
	for _, h := range []string{"pre-commit", "commit-msg", "post-commit", "pre-push", "post-index-change"} {
		script := "#!/bin/sh\necho " + h + " >> " + marker + "\n"
		if err := os.WriteFile(filepath.Join(e.ws, ".git", "hooks", h), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(e.ws, "y.txt"), []byte("y\n"), 0o644)
	e.ok(t, "add", "y.txt")
	e.ok(t, "commit", "-m", "y")
	e.ok(t, "push", "HEAD:refs/heads/session/"+session)
	if b, err := os.ReadFile(marker); err == nil {
		t.Errorf("hooks ran on the controller: %s", b)
	}
}

// A configuration the agent wrote into the shared .git/config that would
// run a program on the controller makes the gate refuse, and nothing runs.
func TestGateRefusesHostileConfig(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, ws, marker string)
	}{
		{"hooksPath", func(t *testing.T, ws, marker string) {
			hooks := filepath.Join(ws, "hooks")
			os.MkdirAll(hooks, 0o755)
			os.WriteFile(filepath.Join(hooks, "pre-commit"), []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755)
			git(t, ws, "config", "core.hooksPath", hooks)
		}},
		{"clean filter", func(t *testing.T, ws, marker string) {
			os.WriteFile(filepath.Join(ws, ".gitattributes"), []byte("*.txt filter=pwn\n"), 0o644)
			git(t, ws, "config", "filter.pwn.clean", "touch "+marker+"; cat")
		}},
		{"fsmonitor", func(t *testing.T, ws, marker string) {
			git(t, ws, "config", "core.fsmonitor", "touch "+marker)
		}},
		{"include", func(t *testing.T, ws, marker string) {
			inc := filepath.Join(ws, "inc.cfg")
			os.WriteFile(inc, []byte("[core]\n\tpager = touch "+marker+"\n"), 0o644)
			git(t, ws, "config", "include.path", inc)
		}},
		{"symlinked refs", func(t *testing.T, ws, marker string) {
			refs := filepath.Join(ws, ".git", "refs")
			os.Rename(refs, refs+".real")
			if err := os.Symlink(refs+".real", refs); err != nil {
				t.Fatal(err)
			}
		}},
		{"alternates", func(t *testing.T, ws, marker string) {
			os.WriteFile(filepath.Join(ws, ".git", "objects", "info", "alternates"), []byte("/etc\n"), 0o644)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			marker := filepath.Join(t.TempDir(), "ran")
			tc.setup(t, e.ws, marker)
			os.WriteFile(filepath.Join(e.ws, "z.txt"), []byte("z\n"), 0o644)
			for _, args := range [][]string{{"add", "z.txt"}, {"commit", "-a", "-m", "z"}, {"status"}} {
				status, _, raw := e.call(t, args...)
				if status != http.StatusForbidden {
					t.Errorf("git %q with hostile config = %d %s, want 403", args, status, raw)
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Error("a program from the repository's configuration ran on the controller")
			}
		})
	}
}

// The gate waits for the flock on the shared volume.
func TestGateWaitsForLock(t *testing.T) {
	e := setup(t)
	unlock, err := lockedfile.MutexAt(filepath.Join(e.ws, ".git", rules.BastionGitLockFile)).Lock()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := e.gate.Run(context.Background(), []string{"status"}); err != nil {
			t.Errorf("status: %v", err)
		}
	}()
	select {
	case <-done:
		t.Fatal("the gate ran git while the lock was held")
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the gate did not run after the lock was released")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	ws := t.TempDir()
	good := gitctl.Remote{URL: "https://git.example.invalid/r.git"}
	cases := []struct {
		name string
		cfg  gitctl.Config
	}{
		{"no workspace", gitctl.Config{SessionID: "s", Remote: good}},
		{"no session", gitctl.Config{Workspace: ws, Remote: good}},
		{"bad session", gitctl.Config{Workspace: ws, SessionID: "../main", Remote: good}},
		{"no remote", gitctl.Config{Workspace: ws, SessionID: "s"}},
		{"ssh remote", gitctl.Config{Workspace: ws, SessionID: "s", Remote: gitctl.Remote{URL: "ssh://git@h/r"}}},
		{"creds in url", gitctl.Config{Workspace: ws, SessionID: "s", Remote: gitctl.Remote{URL: "https://u:p@h/r"}}},
	}
	for _, tc := range cases {
		if _, err := gitctl.New(tc.cfg); err == nil {
			t.Errorf("New(%s) = nil error, want one", tc.name)
		}
	}
}

func TestParse(t *testing.T) {
	const ref = "HEAD:refs/heads/session/" + session
	cases := []struct {
		name string
		args []string
		want []string // nil: denied
	}{
		{"status", []string{"status", "--short"}, []string{"status", "--short"}},
		{"status path", []string{"status", "src/a.go"}, []string{"status", "--", "src/a.go"}},
		{"status untracked", []string{"status", "-uno"}, []string{"status", "-uno"}},
		{"diff rev path", []string{"diff", "HEAD~1", "--", "a.go"}, []string{"diff", "--no-ext-diff", "--no-textconv", "HEAD~1", "--", "a.go"}},
		{"diff unified", []string{"diff", "-U5"}, []string{"diff", "--no-ext-diff", "--no-textconv", "-U5"}},
		{"diff bad rev", []string{"diff", "a b"}, nil},
		{"add all", []string{"add", "-A"}, []string{"add", "-A"}},
		{"add dot", []string{"add", "."}, []string{"add", "--", "."}},
		{"add dotdot", []string{"add", "a/../../b"}, nil},
		{"commit", []string{"commit", "-m", "-c core.x=y"}, []string{"commit", "--no-verify", "--no-gpg-sign", "--no-edit", "--cleanup=strip", "-m", "-c core.x=y"}},
		{"commit message=", []string{"commit", "--message=hi"}, []string{"commit", "--no-verify", "--no-gpg-sign", "--no-edit", "--cleanup=strip", "-m", "hi"}},
		{"commit -m last", []string{"commit", "-m"}, nil},
		{"log n", []string{"log", "-n", "3", "--format=%H %s"}, []string{"log", "--no-ext-diff", "--no-textconv", "-n3", "--format=%H %s"}},
		{"log n bad", []string{"log", "-n", "--exec"}, nil},
		{"log range", []string{"log", "main..HEAD"}, []string{"log", "--no-ext-diff", "--no-textconv", "main..HEAD"}},
		{"push", []string{"push", ref}, []string{"push", "--no-verify", "--porcelain", "--recurse-submodules=no"}},
		{"push origin", []string{"push", "origin", ref}, []string{"push", "--no-verify", "--porcelain", "--recurse-submodules=no"}},
		{"push bare", []string{"push"}, nil},
		{"push two", []string{"push", "origin", ref, ref}, nil},
		{"fetch", []string{"fetch", "--prune", "origin"}, []string{"fetch", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no", "--prune"}},
		{"fetch refspec", []string{"fetch", "origin", "main"}, nil},
		{"NUL", []string{"status", "a\x00b"}, nil},
		{"pathspec magic", []string{"add", ":(top)x"}, []string{"add", "--", ":(top)x"}},
		{"GIT dir upper", []string{"add", ".GIT/config"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gitctl.Parse(tc.args, session)
			if tc.want == nil {
				var de *gitctl.DeniedError
				if !errors.As(err, &de) {
					t.Errorf("Parse(%q) = %q, %v, want a *DeniedError", tc.args, got.Args, err)
				}
				return
			}
			if err != nil || strings.Join(got.Args, "\x00") != strings.Join(tc.want, "\x00") {
				t.Errorf("Parse(%q) = %q, %v, want %q", tc.args, got.Args, err, tc.want)
			}
		})
	}
}

// forbidden are option prefixes no accepted command may pass to git.
var forbidden = []string{"-c", "-C", "--exec", "--upload-pack", "--receive-pack", "--output", "--git-dir", "--work-tree",
	"--ext-diff", "--textconv", "-F", "--file", "--template", "--force", "-f", "--no-index", "--namespace", "--super-prefix"}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"status\x00--short", "diff\x00HEAD\x00--\x00a", "commit\x00-m\x00msg", "log\x00-n\x005",
		"push\x00origin\x00HEAD:refs/heads/session/" + session, "fetch\x00--prune", "add\x00../x", "-c\x00a=b\x00status",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, "\x00")
		cmd, err := gitctl.Parse(args, session)
		if err != nil {
			return
		}
		if cmd.Args[0] != cmd.Verb || strings.HasPrefix(cmd.Verb, "-") {
			t.Fatalf("Parse(%q) = %q: verb %q", args, cmd.Args, cmd.Verb)
		}
		paths := false
		for i := 1; i < len(cmd.Args); i++ {
			a := cmd.Args[i]
			switch {
			case paths:
				if a != "." && !filepath.IsLocal(a) {
					t.Fatalf("Parse(%q) passes path %q outside the workspace", args, a)
				}
			case a == "--":
				paths = true
			case a == "-m":
				i++ // a message, never an option
			default:
				for _, bad := range forbidden {
					if a == bad || strings.HasPrefix(a, bad+"=") || (len(bad) == 2 && strings.HasPrefix(a, bad) && bad != "-f") {
						t.Fatalf("Parse(%q) passes forbidden option %q", args, a)
					}
				}
			}
		}
	})
}

// The recommended deployment: the git directory on the controller's own
// disk, the agent seeing only the work tree (no .git at all).
func TestGatePrivateGitDir(t *testing.T) {
	e := setup(t)
	priv := filepath.Join(t.TempDir(), "repo.git")
	if err := os.Rename(filepath.Join(e.ws, ".git"), priv); err != nil {
		t.Fatal(err)
	}
	gate, err := gitctl.New(gitctl.Config{
		Workspace: e.ws, GitDir: priv, SessionID: session,
		Remote:   gitctl.Remote{URL: e.remote.url, Token: gitToken},
		UserName: "Agent", UserEmail: "agent@example.invalid",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	os.WriteFile(filepath.Join(e.ws, "p.txt"), []byte("p\n"), 0o644)
	for _, args := range [][]string{{"add", "p.txt"}, {"commit", "-m", "p"}, {"push", "HEAD:refs/heads/session/" + session}} {
		res, err := gate.Run(ctx, args)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("git %q = %+v, %v, want exit 0", args, res, err)
		}
	}
	head := git(t, priv, "rev-parse", "HEAD")
	if got := git(t, e.remote.bare, "rev-parse", "refs/heads/session/"+session); got != head {
		t.Errorf("remote session/%s = %s, want %s", session, got, head)
	}
	if _, err := os.Lstat(filepath.Join(e.ws, ".git")); err == nil {
		t.Error("the workspace has a .git the agent could write")
	}
}

// A push whose new commits carry a denied file (model B's deny globs) is
// refused, even when a later commit deleted it, and nothing is pushed.
func TestGatePushDenyGlobs(t *testing.T) {
	e := setup(t)
	os.WriteFile(filepath.Join(e.ws, ".env"), []byte("SECRET=1\n"), 0o644)
	e.ok(t, "add", ".env")
	e.ok(t, "commit", "-m", "oops")
	os.Remove(filepath.Join(e.ws, ".env"))
	e.ok(t, "add", "-A")
	e.ok(t, "commit", "-m", "remove it")
	status, _, raw := e.call(t, "push", "HEAD:refs/heads/session/"+session)
	if status != http.StatusForbidden || !strings.Contains(raw, ".env") {
		t.Errorf("push with .env in history = %d %s, want 403 naming .env", status, raw)
	}
	if out := git(t, e.remote.bare, "for-each-ref", "refs/heads/session/"); out != "" {
		t.Errorf("remote has session refs %q after a refused push", out)
	}
}
