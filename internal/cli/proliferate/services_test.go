package proliferate

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// newSidecar starts the stand-in sidecar and returns it with the CLI's environment.
func newSidecar(t *testing.T) (*standIn, map[string]string) {
	s := newStandIn(t, "secret-token")
	return s, sidecarEnv(s.serve(), "secret-token")
}

func TestServicesEndToEnd(t *testing.T) {
	s, env := newSidecar(t)
	ctx := t.Context()

	r := cli(t, ctx, env, fast, "services", "list")
	if r.code != 0 {
		t.Fatalf("list = %d %q", r.code, r.stderr)
	}
	equalJSON(t, r.stdout, `{"services":[],"exposedPort":null}`)

	// --flag=value, and a value that begins with "--".
	r = cli(t, ctx, env, fast, "services", "start", "--name=web", "--command", "--version", "--cwd", "/tmp")
	if r.code != 0 {
		t.Fatalf("start = %d %q", r.code, r.stderr)
	}
	svc := decodeLine(t, r.stdout)["service"].(map[string]any)
	if svc["name"] != "web" || svc["command"] != "--version" || svc["cwd"] != "/tmp" || svc["status"] != "running" {
		t.Errorf("start printed %v, want web/--version//tmp/running", svc)
	}

	r = cli(t, ctx, env, fast, "services", "start", "--name", "api", "--command", "./serve",
		"--restart", "on-failure", "--max-restarts", "3", "--ready-http", "http://127.0.0.1:8080/health",
		"--ready-timeout", "30s", "--env", "PORT=8080", "--env", "MODE=a=b", "--stop-signal", "int", "--stop-timeout", "2s")
	if r.code != 0 {
		t.Fatalf("start with options = %d %q", r.code, r.stderr)
	}
	s.mu.Lock()
	got := *s.services["api"]
	s.mu.Unlock()
	if got.Restart != "on-failure" || *got.MaxRestarts != 3 || got.Readiness.HTTP != "http://127.0.0.1:8080/health" ||
		got.Readiness.TimeoutMs != 30000 || got.StopSignal != "SIGINT" || *got.StopTimeoutMs != 2000 {
		t.Errorf("start sent %+v, want the supervision options", got)
	}
	if d := cmp.Diff(map[string]string{"PORT": "8080", "MODE": "a=b"}, got.Env); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}

	r = cli(t, ctx, env, fast, "services", "start", "--name", "rel", "--command", "x", "--cwd", "sub/dir")
	wantCwd, _ := filepath.Abs("sub/dir")
	if r.code != 0 || decodeLine(t, r.stdout)["service"].(map[string]any)["cwd"] != wantCwd {
		t.Errorf("start --cwd sub/dir = %d %q, want cwd %q", r.code, r.stdout, wantCwd)
	}
	s.mu.Lock() // forget it, so the list below has two services
	s.order = s.order[:2]
	delete(s.services, "rel")
	s.mu.Unlock()

	r = cli(t, ctx, env, fast, "services", "list")
	m := decodeLine(t, r.stdout)
	if n := len(m["services"].([]any)); n != 2 {
		t.Errorf("list has %d services, want 2", n)
	}

	r = cli(t, ctx, env, fast, "services", "expose", "--port", "3000")
	if r.code != 0 || r.stdout != `{"success":true,"exposedPort":3000}`+"\n" {
		t.Errorf("expose = %d %q %q", r.code, r.stdout, r.stderr)
	}

	r = cli(t, ctx, env, fast, "services", "restart", "--name", "web")
	if r.code != 0 || decodeLine(t, r.stdout)["service"].(map[string]any)["command"] != "--version" {
		t.Errorf("restart = %d %q %q", r.code, r.stdout, r.stderr)
	}

	r = cli(t, ctx, env, fast, "services", "stop", "--name", "web")
	if r.code != 0 || r.stdout != `{"success":true}`+"\n" {
		t.Errorf("stop = %d %q %q", r.code, r.stdout, r.stderr)
	}

	for _, args := range [][]string{{"services", "stop", "--name", "nope"}, {"services", "restart", "--name", "nope"}} {
		r = cli(t, ctx, env, fast, args...)
		if r.code != 1 || r.stderr != `Error: Service "nope" not found`+"\n" {
			t.Errorf("run(%q) = %d %q, want 1 not found", args, r.code, r.stderr)
		}
	}

	r = cli(t, ctx, map[string]string{"PROLIFERATE_SANDBOX_MCP_URL": env["PROLIFERATE_SANDBOX_MCP_URL"], "SANDBOX_MCP_AUTH_TOKEN": "wrong"}, fast, "services", "list")
	if r.code != 1 || !strings.HasSuffix(r.stderr, "token from SANDBOX_MCP_AUTH_TOKEN\nError: Unauthorized\n") {
		t.Errorf("list with a wrong token = %d %q, want 1 Unauthorized", r.code, r.stderr)
	}
}

func TestRestartOldSidecar(t *testing.T) {
	s, env := newSidecar(t)
	s.old = true
	ctx := t.Context()
	if r := cli(t, ctx, env, fast, "services", "start", "--name", "web", "--command", "npm run dev", "--cwd", "/w"); r.code != 0 {
		t.Fatalf("start = %d %q", r.code, r.stderr)
	}
	s.mu.Lock()
	s.calls = nil
	s.mu.Unlock()
	r := cli(t, ctx, env, fast, "services", "restart", "--name", "web")
	if r.code != 0 {
		t.Fatalf("restart = %d %q", r.code, r.stderr)
	}
	svc := decodeLine(t, r.stdout)["service"].(map[string]any)
	if svc["command"] != "npm run dev" || svc["cwd"] != "/w" {
		t.Errorf("restart started %v, want the same command and cwd", svc)
	}
	want := []string{"POST /api/services/web/restart", "GET /api/services/web", "GET /api/services", "DELETE /api/services/web", "POST /api/services"}
	if d := cmp.Diff(want, s.callLog()); d != "" {
		t.Errorf("calls (-want +got):\n%s", d)
	}
	r = cli(t, ctx, env, fast, "services", "restart", "--name", "nope")
	if r.code != 1 || r.stderr != `Error: Service "nope" not found`+"\n" {
		t.Errorf("restart unknown on an old sidecar = %d %q", r.code, r.stderr)
	}
}

func TestStartWait(t *testing.T) {
	_, env := newSidecar(t)
	ctx := t.Context()
	r := cli(t, ctx, env, fast, "services", "start", "--name", "web", "--command", "slow", "--ready-tcp", "3000", "--wait")
	if r.code != 0 {
		t.Fatalf("start --wait = %d %q", r.code, r.stderr)
	}
	if svc := decodeLine(t, r.stdout)["service"].(map[string]any); svc["ready"] != true {
		t.Errorf("start --wait printed %v, want ready", svc)
	}

	r = cli(t, ctx, env, fast, "services", "wait", "--name", "web")
	if r.code != 0 || decodeLine(t, r.stdout)["service"].(map[string]any)["ready"] != true {
		t.Errorf("wait = %d %q %q", r.code, r.stdout, r.stderr)
	}

	r = cli(t, ctx, env, fast, "services", "start", "--name", "bad", "--command", "fail now", "--ready-tcp", "3000", "--wait")
	if r.code != 1 {
		t.Fatalf("start --wait of a failing service = %d, want 1", r.code)
	}
	for _, want := range []string{"boom: listen EADDRINUSE", `Error: Service "bad" exited with code 1`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr = %q, want it to contain %q", r.stderr, want)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}

	r = cli(t, ctx, env, fast, "services", "wait", "--name", "nope")
	if r.code != 1 || r.stderr != `Error: Service "nope" not found`+"\n" {
		t.Errorf("wait unknown = %d %q", r.code, r.stderr)
	}

	r = cli(t, ctx, env, func(f *Factory) { fast(f); f.ServicePoll = time.Hour }, "services", "wait", "--name", "web", "--timeout", "1ns")
	if r.code != 0 {
		t.Errorf("wait for a ready service with a tiny timeout = %d %q, want 0", r.code, r.stderr)
	}
}

func TestWaitOldSidecar(t *testing.T) {
	s, env := newSidecar(t)
	s.old = true
	if r := cli(t, t.Context(), env, fast, "services", "start", "--name", "web", "--command", "x", "--wait"); r.code != 0 {
		t.Errorf("start --wait on an old sidecar = %d %q, want 0 (running counts as ready)", r.code, r.stderr)
	}
	// Once the sidecar has shown it lacks GET /api/services/{name}, the
	// polls read the list only.
	if n := slices.Index(s.callLog(), "GET /api/services"); n < 0 || slices.Contains(s.callLog()[n:], "GET /api/services/web") {
		t.Errorf("calls = %q, want GET /api/services/web only before the first GET /api/services", s.callLog())
	}
}

func TestLogs(t *testing.T) {
	s, env := newSidecar(t)
	ctx := t.Context()
	cli(t, ctx, env, fast, "services", "start", "--name", "web", "--command", "x")

	r := cli(t, ctx, env, fast, "services", "logs", "--name", "web")
	if r.code != 0 || r.stdout != `{"type":"initial","content":"=== Service \"web\" started ===\n"}`+"\n" {
		t.Errorf("logs = %d %q %q", r.code, r.stdout, r.stderr)
	}

	s.setScript("line one\n", "line two\n", "\x00error")
	r = cli(t, ctx, env, fast, "services", "logs", "--name", "web", "--follow")
	want := `{"type":"initial","content":"=== Service \"web\" started ===\n"}
{"type":"append","content":"line one\n"}
{"type":"append","content":"line two\n"}
{"type":"error","message":"read log: input/output error"}
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("logs --follow = %d\n%s\nwant\n%s (stderr %q)", r.code, r.stdout, want, r.stderr)
	}

	s.setScript("three\n", "\x00error")
	r = cli(t, ctx, env, fast, "services", "logs", "--name", "web", "-f", "--raw")
	if r.code != 1 || r.stdout != "=== Service \"web\" started ===\nthree\n" || r.stderr != "Error: read log: input/output error\n" {
		t.Errorf("logs --follow --raw = %d %q %q", r.code, r.stdout, r.stderr)
	}

	r = cli(t, ctx, env, fast, "services", "logs", "--name", "web", "--tail", "1")
	if r.code != 0 || r.stdout != `{"lines":["=== Service \"web\" started ==="]}`+"\n" {
		t.Errorf("logs --tail = %d %q %q", r.code, r.stdout, r.stderr)
	}

	r = cli(t, ctx, env, fast, "services", "logs", "--name", "nope")
	if r.code != 1 || r.stderr != `Error: No logs found for service "nope"`+"\n" {
		t.Errorf("logs unknown = %d %q", r.code, r.stderr)
	}
}

func TestLogsFollowInterrupted(t *testing.T) {
	s, env := newSidecar(t)
	cli(t, t.Context(), env, fast, "services", "start", "--name", "web", "--command", "x")
	ctx, cancel := context.WithCancel(t.Context())
	var (
		r    result
		done = make(chan struct{})
	)
	s.setScript("tick\n")
	go func() {
		defer close(done)
		r = cli(t, ctx, env, fast, "services", "logs", "--name", "web", "--follow", "--raw")
	}()
	select {
	case <-s.scripted:
	case <-time.After(10 * time.Second):
		t.Fatal("the log stream never started")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("logs --follow did not end after cancel")
	}
	if r.code != exitInterrupted || r.stderr != "" {
		t.Errorf("interrupted follow = %d %q %q, want 130, output, no error", r.code, r.stdout, r.stderr)
	}
}

// TestSidecarComesUpLate: nothing listens when the CLI starts; the sidecar
// binds its port two seconds later and the command still succeeds.
func TestSidecarComesUpLate(t *testing.T) {
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))

	s := newStandIn(t, "tok")
	srv := &http.Server{Handler: s}
	var wg sync.WaitGroup
	wg.Add(1)
	serveErr := make(chan error, 1)
	go func() {
		defer wg.Done()
		time.Sleep(2 * time.Second)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			serveErr <- err
			return
		}
		serveErr <- srv.Serve(ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})

	start := time.Now()
	r := cli(t, t.Context(), sidecarEnv("http://"+addr, "tok"), func(f *Factory) { f.RetryDelay = 500 * time.Millisecond }, "services", "list")
	if r.code != 0 {
		select {
		case err := <-serveErr:
			t.Logf("late listener: %v", err)
		default:
		}
		t.Fatalf("list against a late sidecar = %d %q", r.code, r.stderr)
	}
	equalJSON(t, r.stdout, `{"services":[],"exposedPort":null}`)
	if el := time.Since(start); el < 1500*time.Millisecond {
		t.Errorf("list took %v; the sidecar only came up after 2s", el)
	}
}

func TestSidecarNeverUp(t *testing.T) {
	url := closedURL(t)
	r := cli(t, t.Context(), sidecarEnv(url, "tok"), fast, "services", "list")
	// One line while retrying, one error that names the URL and where it came from.
	want := "waiting for the sidecar at " + url + "…\nError: cannot reach the sidecar at " + url + " (from PROLIFERATE_SANDBOX_MCP_URL): "
	if r.code != 1 || !strings.HasPrefix(r.stderr, want) || !strings.HasSuffix(r.stderr, "connection refused\n") {
		t.Errorf("list with no sidecar = %d %q, want 1 and %q…connection refused", r.code, r.stderr, want)
	}
	if n := strings.Count(r.stderr, "\n"); n != 2 {
		t.Errorf("stderr has %d lines, want 2: %q", n, r.stderr)
	}
	r = cli(t, t.Context(), map[string]string{"PROLIFERATE_SANDBOX_MCP_URL": "127.0.0.1:4000", "SERVICE_TO_SERVICE_AUTH_TOKEN": "tok"}, fast, "services", "list")
	if r.code != 2 || r.stderr != `Error: sidecar URL "127.0.0.1:4000" (from PROLIFERATE_SANDBOX_MCP_URL) is not a URL; want http://host:port, e.g. http://127.0.0.1:4000`+"\n" {
		t.Errorf("list with a URL without a scheme = %d %q, want a usage error", r.code, r.stderr)
	}
}

func (s *standIn) setScript(chunks ...string) {
	s.mu.Lock()
	s.script = chunks
	s.mu.Unlock()
}

func TestEvents(t *testing.T) {
	url := newServer(t, eventsHandler(`{"type":"started","service":"web","time":1}`, `{ "type": "ready", "service": "web", "time": 2 }`))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	r := cli(t, ctx, sidecarEnv(url, "tok"), fast, "services", "events")
	want := `{"type":"started","service":"web","time":1}` + "\n" + `{"type":"ready","service":"web","time":2}` + "\n"
	if r.code != exitInterrupted || r.stdout != want || r.stderr != "" {
		t.Errorf("events = %d %q %q, want 130 and both events", r.code, r.stdout, r.stderr)
	}
}

func TestLogsEmpty(t *testing.T) {
	url := newServer(t, eventsHandler())
	env := sidecarEnv(url, "tok")
	quick := func(f *Factory) { fast(f); f.LogsFirstFrameWait = 50 * time.Millisecond }
	r := cli(t, t.Context(), env, quick, "services", "logs", "--name", "quiet")
	if r.code != 0 || r.stdout != `{"type":"initial","content":""}`+"\n" || r.stderr != "" {
		t.Errorf("logs of an empty log = %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = cli(t, t.Context(), env, quick, "services", "logs", "--name", "quiet", "--raw")
	if r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("logs --raw of an empty log = %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestWaitInterrupted(t *testing.T) {
	_, env := newSidecar(t)
	cli(t, t.Context(), env, fast, "services", "start", "--name", "web", "--command", "slow", "--ready-tcp", "3000")
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	r := cli(t, ctx, env, func(f *Factory) { fast(f); f.ServicePoll = time.Hour }, "services", "wait", "--name", "web")
	if r.code != exitInterrupted || r.stdout != "" || r.stderr != "" {
		t.Errorf("interrupted wait = %d %q %q, want 130 and no output", r.code, r.stdout, r.stderr)
	}
}

// A rejected token ends with the contract's "Error: Unauthorized" as the last
// line of stderr, exit 1; the line before names the variable the token came
// from, the fallback variable included.
func TestRejectedTokenNamesItsVariable(t *testing.T) {
	s, _ := newSidecar(t)
	url := s.serve()
	for _, name := range []string{"SANDBOX_MCP_AUTH_TOKEN", "SERVICE_TO_SERVICE_AUTH_TOKEN"} {
		r := cli(t, t.Context(), map[string]string{"PROLIFERATE_SANDBOX_MCP_URL": url, name: "wrong"}, fast, "services", "list")
		want := "the sidecar at " + url + " rejected the token from " + name + "\nError: Unauthorized\n"
		if r.code != 1 || r.stderr != want {
			t.Errorf("list with a wrong %s = %d %q, want 1 %q", name, r.code, r.stderr, want)
		}
	}
}
