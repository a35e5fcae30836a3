package modal

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/coderun"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestCoderunSession: provider/coderun on the Modal provider, through real gRPC and
// the local server on image-booted sandboxes, with coderun's egress hosts (the npm
// registry for the build, the configured hosts, here none, for sessions) as Modal's
// outbound allow-lists, which the server's engine enforces: the dependency snapshot
// is a Modal filesystem snapshot, the session's /workspace a Modal Volume, the REPL reached
// through DialPort's exec relay. A file written in /workspace outlives the session's
// sandbox; Cleanup deletes the volume. Skipped without npm (it fetches Deno); fails within a minute without the registry.
func TestCoderunSession(t *testing.T) {
	testutil.RequireNPMRegistry(t, "code execution on Modal (npm install deno, deno install is-odd)")
	host := modaltest.NewImageEngine(t, local.EngineOptions{})
	_, env := imageServer(t, host)
	e := newProvider(t, env).Engine()
	e.image = BaseImage{Def: image.Image{From: certsImage(t, host)}}
	cfg, err := coderun.Parse([]byte(`
[sandbox]
enabled = true
provider = "modal"
timeout_seconds = 30

[[sandbox.dependencies]]
package = "is-odd"
version = "3.0.1"
hosts = ["api.example.invalid"]
`), func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var progress strings.Builder
	r, err := coderun.New(ctx, coderun.Options{Config: cfg, Engine: e, DataDir: filepath.Join(t.TempDir(), "coderun"),
		Progress: &progress, ReapEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	start := time.Now()
	snap, err := r.EnsureSnapshot(ctx)
	if err != nil {
		t.Fatalf("EnsureSnapshot: %v\n%s", err, progress.String())
	}
	t.Logf("dependency snapshot %s built in %v", snap.ID, time.Since(start).Round(time.Millisecond))

	s, err := r.Session("modal-1")
	if err != nil {
		t.Fatal(err)
	}
	run := func(code string) coderun.RunResult {
		t.Helper()
		res, err := s.RunCode(ctx, code, "test")
		if err != nil {
			t.Fatalf("RunCode(%q): %v", code, err)
		}
		return res
	}
	start = time.Now()
	if res := run("import isOdd from 'is-odd'; const x = 41; isOdd(x)"); !res.Success || string(res.Result) != "true" {
		t.Errorf("first RunCode = %+v (result %s), want true", res, res.Result)
	}
	t.Logf("first run_code (sandbox from the snapshot, volume, eval): %v", time.Since(start).Round(time.Millisecond))
	checkSessionEgress(t, ctx, e, "modal-1")
	if res := run(`x + 1`); !res.Success || string(res.Result) != "42" {
		t.Errorf("RunCode(x + 1) = %+v (result %s), want 42: the REPL keeps its variables", res, res.Result)
	}
	if res := run(`await Deno.writeTextFile("` + rules.CoderunWorkspace + `/kept.txt", "kept"); 1`); !res.Success {
		t.Fatalf("write to /workspace: %+v", res)
	}
	vol := s.Volume()
	if v, err := e.GetVolume(ctx, vol); err != nil || len(v.UsedBy) != 1 {
		t.Errorf("the session's volume %s = %+v, %v; want a Modal Volume the session's sandbox mounts", vol, v, err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if res := run(`await Deno.readTextFile("` + rules.CoderunWorkspace + `/kept.txt")`); !res.Success || string(res.Result) != `"kept"` {
		t.Errorf("after the sandbox was replaced, /workspace/kept.txt = %+v (result %s), want \"kept\"", res, res.Result)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := r.Cleanup(ctx, time.Now().Add(24*time.Hour), time.Nanosecond)
	if err != nil || len(rep.Volumes) != 1 {
		t.Errorf("Cleanup = %+v, %v; want the session's volume deleted", rep, err)
	}
	if _, err := e.GetVolume(ctx, vol); err == nil {
		t.Errorf("volume %s still exists after Cleanup", vol)
	}
}

// checkSessionEgress: the session's sandbox reaches the outside only through the
// engine's proxy, which refuses a host outside the configured ones (the npm registry,
// allowed to the build's sandbox only) with 403: a raw request from bash, so Deno's
// own --allow-net is not what refuses it.
func checkSessionEgress(t *testing.T, ctx context.Context, e *Engine, session string) {
	t.Helper()
	infos, err := e.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if got, err := e.Get(ctx, in.ID); err != nil || got.Labels["coderun-session"] != session {
			continue
		}
		var out strings.Builder
		script := `exec 3<>/dev/tcp/127.0.0.1/${HTTP_PROXY##*:}; printf 'GET http://registry.npmjs.org/ HTTP/1.0\r\nHost: registry.npmjs.org\r\n\r\n' >&3; head -c 12 <&3`
		code, err := e.Exec(ctx, in.ID, engine.ExecRequest{Argv: []string{"bash", "-c", script}, Stdout: &out, Stderr: &out, Timeout: 30 * time.Second})
		if err != nil || code != 0 || !strings.Contains(out.String(), " 403") {
			t.Errorf("GET registry.npmjs.org through the session sandbox's proxy = %q (exit %d, %v), want 403 (only api.example.invalid is allowed)", out.String(), code, err)
		}
		return
	}
	t.Errorf("no sandbox of session %s found", session)
}
