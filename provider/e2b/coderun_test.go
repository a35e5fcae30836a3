package e2b_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/coderun"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
)

// TestCoderunOnE2B runs provider/coderun on the E2B engine adapter over the local E2B
// server: the dependency snapshot is built in an E2B sandbox (Deno written through
// envd, `deno install` through the egress rules to the npm registry) and is an E2B
// snapshot; a session boots from it with its /workspace on an E2B volume, talks to
// its REPL through DialPort's envd bridge, keeps variables between calls, imports a
// package, and finds its files again in a new sandbox after Close; the cleanup removes
// the volume. Skipped without npm (outside CI), which fetches Deno; fails within a minute
// without the registry.
func TestCoderunOnE2B(t *testing.T) {
	t.Parallel()
	testutil.RequireNPMRegistry(t, "code execution on E2B (npm install deno, deno install is-odd)")
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP, Egress: true})
	eng, err := e2b.NewEngine(srv.Client(t), e2b.EngineOptions{Template: "base", Timeout: 30 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := coderun.Parse([]byte(`
[sandbox]
enabled = true
provider = "e2b"
timeout_seconds = 30

[[sandbox.dependencies]]
package = "is-odd"
version = "3.0.1"
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	// Deno from npm is cached across runs beside the test images (coderun keeps it in
	// DataDir/npm).
	npm := filepath.Join(imagetest.Dir(), "coderun-npm")
	if err := os.MkdirAll(npm, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(npm, filepath.Join(data, "npm")); err != nil {
		t.Fatal(err)
	}
	var progress testutil.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	r, err := coderun.New(ctx, coderun.Options{Config: cfg, Engine: eng, DataDir: data, ReapEvery: -1, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	snap, err := r.EnsureSnapshot(ctx)
	if err != nil {
		t.Fatalf("EnsureSnapshot: %v\n%s", err, progress.String())
	}
	t.Logf("dependency snapshot %s built on E2B in %v", snap.ID, time.Since(start).Round(time.Millisecond))
	s, err := r.Session("e2b-session")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = s.Close(context.Background())
		if _, err := r.Cleanup(context.Background(), time.Now().Add(24*time.Hour), time.Nanosecond); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if vols, err := eng.ListVolumes(context.Background()); err != nil || len(vols) != 0 {
			t.Errorf("volumes after the cleanup = %+v, %v, want none", vols, err)
		}
	}()
	run := func(code, want string) {
		t.Helper()
		start := time.Now()
		res, err := s.RunCode(ctx, code, "test")
		if err != nil || !res.Success || string(res.Result) != want {
			t.Fatalf("RunCode(%q) = %+v (result %s), %v; want %s\n%s", code, res, res.Result, err, want, progress.String())
		}
		t.Logf("RunCode(%.30q): %v", code, time.Since(start).Round(time.Millisecond))
	}
	run("const x: number = 40; x + 2", "42")
	run("x * 2", "80")
	run("import isOdd from 'is-odd'; [isOdd(3), isOdd(4)]", "[true,false]")
	run("await Deno.writeTextFile('/workspace/kept.txt', 'kept'); 1", "1")
	vols, err := eng.ListVolumes(ctx)
	if err != nil || !slices.ContainsFunc(vols, func(v engine.VolumeInfo) bool { return v.Name == s.Volume() && len(v.UsedBy) == 1 }) {
		t.Errorf("E2B volumes = %+v, %v; want the session's %s mounted by its sandbox", vols, err, s.Volume())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	run("await Deno.readTextFile('/workspace/kept.txt')", `"kept"`)
}
