package coderun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// The tests share one local engine and one runner data dir, so the dependency
// snapshot is built once per test binary. Each test makes its own Runner.
var (
	fixtureDir string
	fixtureEng *local.Engine
	engErr     error
	engOnce    sync.Once
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "coderun-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = dir
	code := m.Run()
	if fixtureEng != nil {
		ctx := context.Background()
		list, _ := fixtureEng.List(ctx)
		var left []string
		for _, i := range list {
			if i.State != engine.StateDead {
				left = append(left, i.ID+" "+i.Labels["coderun-session"])
			}
			_ = fixtureEng.Terminate(ctx, i.ID)
		}
		fixtureEng.Close()
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "sandboxes left running by the tests: %v\n", left)
			code = 1
		}
	}
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// needRuntime skips a test without npm (outside CI) and returns the shared engine.
func needRuntime(t testing.TB) *local.Engine {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm is required in CI: %v", err)
		}
		t.Skipf("npm is not installed (it fetches Deno): %v", err)
	}
	engOnce.Do(func() {
		fixtureEng, engErr = local.NewEngine(local.EngineOptions{DataDir: filepath.Join(fixtureDir, "engine")})
	})
	if errors.Is(engErr, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", engErr)
	}
	if engErr != nil {
		t.Fatal(engErr)
	}
	return fixtureEng
}

// testConfig is the acceptance configuration: one small npm package, and a package
// with a secret and a host.
func testConfig(t testing.TB, extra string) Config {
	t.Helper()
	c, err := Parse([]byte(`
[sandbox]
enabled = true
timeout_seconds = 20
memory_mb = 256
`+extra+`
[[sandbox.dependencies]]
package = "is-odd"
version = "3.0.1"

[[sandbox.dependencies]]
package = "is-number"
version = "7.0.0"
secret_env = "CODERUN_TEST_TOKEN"
hosts = ["api.example.test"]
`), func(k string) string {
		if k == "CODERUN_TEST_TOKEN" {
			return testSecret
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const testSecret = "tok-7f3a9c1e5b"

// newRunner makes a Runner on the shared engine and data dir; progress and logs go
// to buffers the caller may inspect.
func newRunner(t testing.TB, c Config, o Options) (*Runner, *strings.Builder) {
	t.Helper()
	eng := needRuntime(t)
	var progress strings.Builder
	o.Config, o.Engine, o.DataDir = c, eng, filepath.Join(fixtureDir, "runner")
	if o.Progress == nil {
		o.Progress = &syncWriter{w: &progress}
	}
	r, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, &progress
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// session returns a session whose sandbox is closed when the test ends.
func session(t testing.TB, r *Runner, id string) *Session {
	t.Helper()
	s, err := r.Session(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func run(t testing.TB, s *Session, code string) RunResult {
	t.Helper()
	res, err := s.RunCode(context.Background(), code, "test")
	if err != nil {
		t.Fatalf("RunCode(%q): %v", code, err)
	}
	return res
}

func itoa(n int) string { return fmt.Sprint(n) }

func newTestLogger(w *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
