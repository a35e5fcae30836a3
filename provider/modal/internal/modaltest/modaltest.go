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
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// serveEnv ("port body") turns the test binary into the HTTP server of ServeHTTP.
const serveEnv = "_MODALTEST_SERVE_HTTP"

// ServeEnv is serveEnv for a test that starts the binary inside a sandbox itself: a
// test binary importing this package, run with ServeEnv="port body", serves body on
// the sandbox's 127.0.0.1:port.
const ServeEnv = serveEnv

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
// made is terminated at cleanup, and then every volume removed (the engine keeps a
// volume loop-mounted until then), so no process, goroutine or mount outlives the test.
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
		vols, _ := eng.ListVolumes(context.Background())
		for _, v := range vols {
			if err := eng.RemoveVolume(context.Background(), v.Name); err != nil {
				t.Errorf("remove volume %s: %v", v.Name, err)
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

// Server is what Serve serves: modalserver.Server, which this package cannot name
// (modalserver's own tests import it).
type Server interface {
	Serve(net.Listener) error
	Close() error
}

// Serve serves srv on a loopback port and returns its URL. srv is closed at cleanup
// (a test may close it earlier); an error from Serve fails the test.
func Serve(t testing.TB, srv Server) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + l.Addr().String()
}

// SDKEnv is the environment (KEY=VALUE) that points a Modal SDK at url and keeps it
// from reading a config file, profile or environment of the machine. Tokens are not
// part of it.
func SDKEnv(t testing.TB, url string) []string {
	return []string{"MODAL_SERVER_URL=" + url, "MODAL_CONFIG_PATH=" + filepath.Join(t.TempDir(), "none.toml"),
		"MODAL_PROFILE=", "MODAL_ENVIRONMENT="}
}

// PointSDK sets SDKEnv in the process environment for the test (t.Setenv): Modal's
// Go SDK reads its settings from there.
func PointSDK(t testing.TB, url string) {
	for _, kv := range SDKEnv(t, url) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}
