// Package modaltest is what the Modal protocol tests (provider/modal and its
// modalserver) run on: the real local engine in isolated mode, and a small HTTP server
// started inside one of its sandboxes so tunnels and DialPort reach a port the
// sandbox listens on. Test code only.
//
// A test binary that imports this package serves HTTP instead of running its tests
// when serveEnv is set: that is how ServeHTTP runs the server inside a sandbox.
package modaltest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// serveEnv ("port body") turns the test binary into the HTTP server of ServeHTTP.
const serveEnv = "_MODALTEST_SERVE_HTTP"

// serverPath is where ServeHTTP copies the test binary inside the sandbox: /run is
// writable and never part of a snapshot.
const serverPath = "/run/modaltest-http"

func init() {
	v, ok := os.LookupEnv(serveEnv)
	if !ok {
		return
	}
	port, body, _ := strings.Cut(v, " ")
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	err = http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	os.Stderr.WriteString(err.Error() + "\n")
	os.Exit(1)
}

// Engine is the isolated local engine on a temp data dir of t (o.DataDir is set
// here). It is skipped where namespaces are not permitted: an unisolated sandbox's
// paths are the host's, and these tests write /home/user and /tmp. Every sandbox it
// made is terminated at cleanup, so no process or goroutine outlives the test.
func Engine(t testing.TB, o local.EngineOptions) *local.Engine {
	t.Helper()
	o.DataDir = t.TempDir()
	eng, err := local.NewEngine(o)
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: the Modal protocol tests run on the isolated local engine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		infos, _ := eng.List(context.Background())
		for _, in := range infos {
			if err := eng.Terminate(context.Background(), in.ID); err != nil {
				t.Errorf("terminate %s: %v", in.ID, err)
			}
		}
		eng.Close()
	})
	return eng
}

// ServeHTTP starts, inside the engine's sandbox id, an HTTP server on the sandbox's
// 127.0.0.1:port that answers every request with body, and returns once DialPort
// reaches it. The server is this test binary (copied into the sandbox); it ends with
// the sandbox.
func ServeHTTP(t testing.TB, eng *local.Engine, id string, port int, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.WriteFile(ctx, id, serverPath, bin, 0o755); err != nil {
		t.Fatalf("copy the server into sandbox %s: %v", id, err)
	}
	if _, err := eng.StartDetached(ctx, id, engine.ExecRequest{Argv: []string{serverPath},
		Env: []string{serveEnv + "=" + strconv.Itoa(port) + " " + body}}); err != nil {
		t.Fatalf("start the server in sandbox %s: %v", id, err)
	}
	for {
		c, err := eng.DialPort(ctx, id, port)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the server in sandbox %s does not listen on %d: %v", id, port, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
