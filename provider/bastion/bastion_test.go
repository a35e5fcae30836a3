package bastion_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// sandboxMCP is the sandbox-mcp binary the engine binds into every sandbox.
var sandboxMCP string

func TestMain(m *testing.M) {
	local.MaybeRunInit()
	dir, err := os.MkdirTemp("", "bastion-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sandboxMCP = filepath.Join(dir, "sandbox-mcp")
	if err := testutil.BuildCommands(dir, "sandbox-mcp"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// Idle keep-alive connections of the tests' HTTP clients end on their
		// own, and so does the Modal SDK's command router connection with its
		// gRPC callback serializer (provider/modal/modalserver's TestMain);
		// anything else still running (a watcher, a served listener) is a leak.
		if err := goleak.Find(goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// requireEngine skips, saying why, where the local engine cannot isolate; a
// program missing fails under $CI, which installs them (testutil.NeedCommand).
func requireEngine(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a bastion session runs two isolated sandboxes of the local engine, which need root on the host")
	}
	for _, prog := range []string{"runc", "git", "curl", "ip", "python3"} {
		testutil.NeedCommand(t, prog, "the bastion tests run the pair on the local engine")
	}
}

// hostAddress gives the host an address of its own, on a veth link of a
// unique name removed when t ends: the sandboxes' egress proxy never lets them
// reach the host's loopback, and the test must not borrow the machine's
// other addresses.
func hostAddress(t testing.TB) string {
	t.Helper()
	b := make([]byte, 2)
	rand.Read(b)
	suffix := hex.EncodeToString(b) + randomHex(t, 1)
	link := "bst" + suffix
	addr := fmt.Sprintf("10.%d.%d.%d", 230+int(b[0])%20, b[1], 2+int(b[0])%200)
	for _, args := range [][]string{{"link", "add", link, "type", "veth", "peer", "name", "bsp" + suffix},
		{"addr", "add", addr + "/32", "dev", link}, {"link", "set", link, "up"}, {"link", "set", "bsp" + suffix, "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			exec.Command("ip", "link", "del", link).Run()
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { exec.Command("ip", "link", "del", link).Run() })
	return addr
}

// gitRemote is a bare repository with main, served by git http-backend on
// addr, which requires token.
type gitRemote struct {
	bare, url, main string
}

func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func serveGit(t testing.TB, addr, token string) gitRemote {
	t.Helper()
	dir := t.TempDir()
	seed, bare := filepath.Join(dir, "seed"), filepath.Join(dir, "app.git")
	git(t, dir, "init", "-q", "-b", "main", seed)
	os.WriteFile(filepath.Join(seed, "README.md"), []byte("hello\n"), 0o644)
	git(t, seed, "add", "README.md")
	git(t, seed, "commit", "-q", "-m", "first")
	git(t, dir, "clone", "-q", "--bare", seed, bare)
	git(t, bare, "config", "http.receivepack", "true")
	gitPath, _ := exec.LookPath("git")
	backend := &cgi.Handler{Path: gitPath, Args: []string{"http-backend"}, Dir: dir,
		Env: []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}}
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "x-access-token" || pass != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "auth", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return gitRemote{bare: bare, url: "http://" + ln.Addr().String() + "/app.git", main: git(t, bare, "rev-parse", "refs/heads/main")}
}

// serveLLM is an upstream on addr that records the x-api-key of every request.
func serveLLM(t testing.TB, addr string) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var keys []string
	ln, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		fmt.Fprint(w, `{"content":"hi"}`)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), keys...)
	}
}

// newProvider is the one provider over a local engine of the test's own
// (isolatedEngine: whatever a failing test leaves is removed at its end).
func newProvider(t testing.TB) (*provider.Provider, *local.Engine) {
	t.Helper()
	eng := isolatedEngine(t)
	p, err := provider.New(eng, provider.Options{Kind: provider.KindLocal, SidecarTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return p, eng
}

// sh runs script as root inside id, stdout and stderr together.
func sh(t testing.TB, eng engine.Engine, id, script string) (string, int) {
	t.Helper()
	var out strings.Builder
	code, err := eng.Exec(t.Context(), id, engine.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out,
		Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatalf("exec %q in %s: %v (output %q)", script, id, err, out.String())
	}
	return out.String(), code
}

// get is a GET with an optional bearer token; it returns the status and body.
func get(t testing.TB, url, token string) (int, string) {
	t.Helper()
	return getWith(t, &http.Client{Timeout: 30 * time.Second}, url, token)
}

// getWith is get through hc.
func getWith(t testing.TB, hc *http.Client, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 64<<10)
	n, _ := resp.Body.Read(buf)
	b.Write(buf[:n])
	return resp.StatusCode, b.String()
}

// gone says whether a sandbox is terminated or dead.
func gone(ctx context.Context, eng engine.Engine, id string) bool {
	info, err := eng.Get(ctx, id)
	return err != nil || info.State == engine.StateDead
}

// waitGone waits up to a minute for id to be gone.
func waitGone(t testing.TB, eng engine.Engine, id string) bool {
	for range 600 {
		if gone(t.Context(), eng, id) {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// TestBastionCreateFailsClean: a create that fails once both halves exist
// (here the controller cannot clone) leaves no sandbox and no volume of its
// own making.
func TestBastionCreateFailsClean(t *testing.T) {
	requireEngine(t)
	p, eng := newProvider(t)
	session := "bastion-" + randomHex(t, 4)
	_, err := p.CreateBastion(t.Context(), provider.CreateOptions{SessionID: session},
		provider.BastionOptions{PlatformToken: "plat-" + randomHex(t, 8), RepoURL: "http://127.0.0.1:1/nope.git"})
	if err == nil || !strings.Contains(err.Error(), "clone") {
		t.Fatalf("CreateBastion with an unreachable repository = %v, want the clone's failure", err)
	}
	infos, err := eng.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		t.Errorf("sandbox %s (%s) left after the failed create", in.ID, in.State)
	}
	vols, err := eng.ListVolumes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vols {
		if v.Labels[rules.LabelSession] == session {
			t.Errorf("volume %s left after the failed create", v.Name)
		}
	}
}
