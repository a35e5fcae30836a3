package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/coderun"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

const codeDocs = `# Tiny SDK

## Installation

Add it with npm install tiny-sdk.

## Webhooks

Verify each delivery's signature header before you trust the payload.
`

// codeSetup writes a config whose docs come from the test's own server and returns
// its path, the data dir and the environment, and whether the data dir has the shared
// test image store (codeImages). fresh removes the dependency image first, so the
// test builds it; without it the test reuses the one an earlier test built.
func codeSetup(t *testing.T, fresh bool) (config, dataDir string, getenv func(string) string, images bool) {
	t.Helper()
	requireNamespaces(t)
	// Deno and the config's package come from the npm registry.
	testutil.RequireNPMRegistry(t, "code execution (npm install deno, is-odd)")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(codeDocs)) }))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	config = filepath.Join(dir, "config.toml")
	toml := "[sandbox]\nenabled = true\nmemory_mb = 256\n\n[[sandbox.dependencies]]\npackage = \"is-odd\"\nversion = \"3.0.1\"\n" +
		"docs = [\"" + srv.URL + "/sdk.md\"]\nsecret_env = \"TINY_TOKEN\"\nhosts = [\"api.tiny.test\"]\n"
	if err := os.WriteFile(config, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	dataDir = filepath.Join(dir, "data")
	env := map[string]string{"HOME": dir, "TINY_TOKEN": "tiny-secret-0042", "PATH": os.Getenv("PATH")}
	getenv = func(k string) string { return env[k] }
	images = codeImages(t, config, dataDir, getenv, fresh)
	t.Cleanup(func() {
		if err := cleanupCode(dataDir); err != nil {
			t.Errorf("clean up the engine: %v", err)
		}
	})
	return config, dataDir, getenv, images
}

// codeImage is the dependency image the code tests share (their configs have the
// same packages, so the same image name): the package's first test that needs it
// fresh builds it, the others reuse it, and removeCodeImage removes it when the
// package's tests have ended.
var codeImage struct {
	sync.Mutex
	store *store.Store
	name  string
}

// codeImages links the shared test image store into the data dir where it can be had
// (root and mmdebstrap; required in CI), so `code` builds the dependency snapshot as
// an image on its Debian base. With fresh, the image is removed first (one an earlier
// test built, or a crashed run left).
func codeImages(t *testing.T, config, dataDir string, getenv func(string) string, fresh bool) bool {
	t.Helper()
	if _, err := exec.LookPath("mmdebstrap"); os.Geteuid() != 0 || err != nil && os.Getenv("CI") == "" {
		return false
	}
	s, _ := imagetest.Base(t)
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(imagetest.Dir(), "store"), filepath.Join(dataDir, "images")); err != nil {
		t.Fatal(err)
	}
	cfg, err := coderun.LoadFile(config, getenv)
	if err != nil {
		t.Fatal(err)
	}
	e, err := local.NewEngine(local.EngineOptions{DataDir: dataDir, Images: s})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r, err := coderun.New(t.Context(), coderun.Options{Config: cfg, Engine: e, Images: s, DataDir: t.TempDir(), ReapEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	name := r.SnapshotName()
	r.Close()
	codeImage.Lock()
	defer codeImage.Unlock()
	codeImage.store, codeImage.name = s, name
	if fresh {
		if err := removeImage(s, name); err != nil {
			t.Fatal(err)
		}
	}
	return true
}

// removeCodeImage removes the code tests' dependency image, if they made one; it
// returns 1 when that fails.
func removeCodeImage() int {
	codeImage.Lock()
	defer codeImage.Unlock()
	if codeImage.store == nil {
		return 0
	}
	if err := removeImage(codeImage.store, codeImage.name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// removeImage removes the image name from s, if it is there.
func removeImage(s *store.Store, name string) error {
	in, err := s.Get(context.Background(), name)
	if err != nil {
		return nil
	}
	if _, err := s.Remove(context.Background(), in.ID); err != nil {
		return fmt.Errorf("remove the dependency image %s: %w", name, err)
	}
	return nil
}

func runCLI(t *testing.T, getenv func(string) string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb strings.Builder
	code = run(t.Context(), args, getenv, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

// TestCodeCLI builds the dependency image afresh (it checks the first snapshot's
// progress and the second's reuse).
func TestCodeCLI(t *testing.T) {
	config, dataDir, getenv, images := codeSetup(t, true)
	base := []string{"--data-dir", dataDir, "-v", "code"}
	cli := func(stdin string, args ...string) (string, string, int) {
		return runCLI(t, getenv, stdin, append(append(append([]string(nil), base...), args...), "--config", config)...)
	}
	out, errOut, code := cli("", "snapshot")
	var snap struct {
		Name   string `json:"name"`
		Reused bool   `json:"reused"`
		Image  bool   `json:"image"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &snap) != nil || !strings.HasPrefix(snap.Name, "deps-") || snap.Reused || snap.Image != images {
		t.Fatalf("code snapshot = %d %q %s; want a new one, an image: %v", code, out, errOut, images)
	}
	if !strings.Contains(errOut, "deno install") || !strings.Contains(errOut, "3 new") {
		t.Errorf("snapshot progress lacks the install or the docs: %s", errOut)
	}
	if out, _, _ = cli("", "snapshot"); !strings.Contains(out, `"reused": true`) {
		t.Errorf("second snapshot = %s, want reused", out)
	}

	// Two CLI calls share the session's REPL.
	var logs strings.Builder
	for _, step := range []struct{ code, want string }{
		{"import isOdd from 'is-odd'; const n = 20; console.log('n is', n); n", `"result": 20`},
		// The secret travels as the engine's placeholder: set, and not the value.
		{"[n * 2, isOdd(n + 1), Deno.env.get('TINY_TOKEN') !== 'tiny-secret-0042', (Deno.env.get('TINY_TOKEN') ?? '').length > 0]", "[\n    40,\n    true,\n    true,\n    true\n  ]"},
	} {
		out, errOut, code = cli(step.code, "run", "--session", "s1", "-")
		logs.WriteString(errOut)
		if code != 0 || !strings.Contains(out, step.want) {
			t.Errorf("code run %q = %d %s %s, want %s", step.code, code, out, errOut, step.want)
		}
	}
	if out, _, code = cli("throw new Error('nope')", "run", "--session", "s1"); code != 1 || !strings.Contains(out, "Error: nope") {
		t.Errorf("a failing run = %d %s, want exit 1 and the error", code, out)
	}

	out, _, code = cli("", "search", "verify", "the", "signature")
	var res struct {
		Results []struct{ Title, Package string }
		Mode    string
	}
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || len(res.Results) == 0 || res.Results[0].Title != "Webhooks" || res.Mode != "bm25" {
		t.Errorf("code search = %d %s", code, out)
	}

	if _, errOut, code = cli("", "close", "--session", "s1"); code != 0 {
		t.Errorf("code close = %d %s", code, errOut)
	}
	// The volume outlives the sandbox until gc with a short TTL.
	vols := codeVolumes(t, dataDir)
	if len(vols) != 1 || vols[0].Labels["coderun-session"] != "s1" || len(vols[0].UsedBy) != 0 || vols[0].CapacityBytes != 300<<20 {
		t.Errorf("engine volumes after close = %+v, want the session's, unused, of 300 MB", vols)
	}
	out, _, code = cli("", "gc", "--ttl", "1ns")
	if code != 0 || len(vols) == 0 || !strings.Contains(out, vols[0].Name) {
		t.Errorf("code gc = %d %s, want the session's volume deleted", code, out)
	}
	if vols := codeVolumes(t, dataDir); len(vols) != 0 {
		t.Errorf("engine volumes after gc = %+v, want none", vols)
	}
	if strings.Contains(logs.String(), "tiny-secret-0042") {
		t.Error("the secret shows in sandboxctl's logs")
	}
}

// The MCP Inspector's CLI lists the three tools and calls them, on the dependency
// image TestCodeCLI built when both run.
func TestCodeMCPInspector(t *testing.T) {
	config, dataDir, getenv, _ := codeSetup(t, false)
	inspector := installInspector(t)
	bin := filepath.Join(testutil.Commands(t, "sandboxctl"), "sandboxctl")
	server := filepath.Join(t.TempDir(), "server.sh")
	script := "#!/bin/sh\nexec " + bin + " --data-dir " + dataDir + " code mcp --config " + config + "\n"
	if err := os.WriteFile(server, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	call := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), inspector, append([]string{"--cli", server}, args...)...)
		cmd.Env = append(os.Environ(), "TINY_TOKEN="+getenv("TINY_TOKEN"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("inspector %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := call("--method", "tools/list")
	for _, tool := range []string{`"run_code"`, `"search_docs"`, `"save_code_modules"`} {
		if !strings.Contains(out, tool) {
			t.Errorf("tools/list lacks %s:\n%s", tool, out)
		}
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--tool-name", "run_code", "--tool-arg", "code=import isOdd from 'is-odd'; isOdd(7)", "--tool-arg", "session=m1"}, `\"result\":true`},
		{[]string{"--tool-name", "run_code", "--tool-arg", "code=throw new Error('nope')", "--tool-arg", "session=m1"}, `"isError": true`},
		{[]string{"--tool-name", "run_code", "--tool-arg", "code=await Deno.mkdir('lib', {recursive: true}); await Deno.writeTextFile('lib/triage.ts', 'export const stale = 1;\\n')",
			"--tool-arg", "session=m1"}, `\"success\":true`},
		{[]string{"--tool-name", "save_code_modules", "--tool-arg", `modules=[{"path":"lib/triage.ts","description":"triage stale tickets"}]`, "--tool-arg", "session=m1"}, `\"saved\": 1`},
		{[]string{"--tool-name", "search_docs", "--tool-arg", "query=stale tickets", "--tool-arg", "session=m1"}, `lib/triage.ts`},
		{[]string{"--tool-name", "search_docs", "--tool-arg", "query=install"}, `\"title\":\"Installation\"`},
	}
	for _, tt := range tests {
		if out := call(append([]string{"--method", "tools/call"}, tt.args...)...); !strings.Contains(out, tt.want) {
			t.Errorf("tools/call %q = %s, want %s", tt.args, out, tt.want)
		}
	}
}

// installInspector installs the MCP Inspector with npm into a cache dir kept between
// runs and returns its binary.
func installInspector(t *testing.T) string {
	t.Helper()
	return testutil.NPMPackages(t, "mcp-inspector", "node_modules/.bin/mcp-inspector", "@modelcontextprotocol/inspector@0")
}

// cleanupCode ends every sandbox of the test's engine, then removes every volume:
// they stay mounted on the host until removed, and TempDir's cleanup could not
// remove the data dir.
func cleanupCode(dataDir string) error {
	ctx := context.Background()
	e, err := local.NewEngine(local.EngineOptions{DataDir: dataDir})
	if err != nil {
		return err
	}
	defer e.Close()
	list, err := e.List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, i := range list {
		if err := e.Terminate(ctx, i.ID); err != nil {
			errs = append(errs, err)
		}
	}
	vols, err := e.ListVolumes(ctx)
	if err != nil {
		return err
	}
	for _, v := range vols {
		if err := e.RemoveVolume(ctx, v.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// codeVolumes lists the engine's volumes of the test's data dir.
func codeVolumes(t *testing.T, dataDir string) []engine.VolumeInfo {
	t.Helper()
	e, err := local.NewEngine(local.EngineOptions{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	vols, err := e.ListVolumes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return vols
}
