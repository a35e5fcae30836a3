package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/proliferate-ai/sandbox-mcp/internal/clitest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) {
	local.MaybeRunInit()
	testscript.Main(afterRun{m, removeCodeImage}, map[string]func(){
		"sandboxctl": func() {
			os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

// afterRun runs after when the package's tests have ended (testscript.Main exits
// the process itself).
type afterRun struct {
	m     *testing.M
	after func() int
}

func (a afterRun) Run() int {
	code := a.m.Run()
	if a.after() != 0 {
		code = 1
	}
	return code
}

// buildBinaries builds sandbox-mcp and proliferate for the local backend to bind
// into sandboxes, in a temp dir of t.
func buildBinaries(t *testing.T) string {
	return testutil.Commands(t, "sandbox-mcp", "proliferate")
}

// requireNamespaces skips where the local engine may not isolate.
func requireNamespaces(t *testing.T) {
	e, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir()})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
}

func TestScripts(t *testing.T) {
	requireNamespaces(t)
	bins := buildBinaries(t)
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv("SANDBOXCTL_SANDBOX_MCP", filepath.Join(bins, "sandbox-mcp"))
			env.Setenv("SANDBOXCTL_PROLIFERATE", filepath.Join(bins, "proliferate"))
			env.Setenv("SANDBOXCTL_DATA_DIR", filepath.Join(env.WorkDir, "data"))
			env.Setenv("GIT_CONFIG_GLOBAL", "/dev/null")
			env.Setenv("GIT_CONFIG_NOSYSTEM", "1")
			// Whatever a script leaves running is terminated.
			dataDir := filepath.Join(env.WorkDir, "data")
			env.Defer(func() { _ = cleanupSandboxes(dataDir) })
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// jsonvar NAME KEY: set $NAME to the string KEY of the JSON object (or of the
			// first element of the JSON array) on the last stdout.
			"jsonvar": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: jsonvar NAME KEY")
				}
				out := ts.ReadFile("stdout")
				var v any
				if err := json.Unmarshal([]byte(out), &v); err != nil {
					ts.Fatalf("stdout is not JSON: %v", err)
				}
				if a, ok := v.([]any); ok && len(a) > 0 {
					v = a[0]
				}
				m, _ := v.(map[string]any)
				s, ok := m[args[1]].(string)
				if !ok {
					ts.Fatalf("no string %q in %s", args[1], out)
				}
				ts.Setenv(args[0], s)
			},
		},
	})
}

// cleanupSandboxes terminates every sandbox of a data dir.
func cleanupSandboxes(dataDir string) error {
	e, err := local.NewEngine(local.EngineOptions{DataDir: dataDir})
	if err != nil {
		return err
	}
	defer e.Close()
	list, err := e.List(context.Background())
	if err != nil {
		return err
	}
	for _, i := range list {
		_ = e.Terminate(context.Background(), i.ID)
	}
	// Volumes stay mounted on the host until removed.
	vols, _ := e.ListVolumes(context.Background())
	for _, v := range vols {
		_ = e.RemoveVolume(context.Background(), v.Name)
	}
	return nil
}

func TestHelpGolden(t *testing.T) {
	getenv := func(k string) string {
		if k == "HOME" {
			return "/home/me"
		}
		return ""
	}
	root := newCmdRoot(&Factory{getenv: getenv})
	paths := clitest.CommandPaths(root, nil)
	if len(paths) < 12 {
		t.Fatalf("found %d commands, want every command of the tree", len(paths))
	}
	for _, p := range paths {
		name := "sandboxctl"
		if len(p) > 0 {
			name += "_" + strings.Join(p, "_")
		}
		t.Run(name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(t.Context(), append(append([]string(nil), p...), "--help"), getenv, strings.NewReader(""), &stdout, &stderr)
			if code != 0 || stderr.String() != "" {
				t.Fatalf("%s --help = %d %q", name, code, stderr.String())
			}
			testutil.Golden(t, filepath.Join("testdata", "help", name+".golden"), []byte(stdout.String()), *update)
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"nope"}, 2, "unknown command"},
		{[]string{"--provider", "nope", "list"}, 2, `unknown provider "nope"`},
		{[]string{"exec", "x"}, 2, "requires at least 2 arg"},
		{[]string{"cp", "a", "b"}, 2, "exactly one of SRC and DST"},
		{[]string{"create", "--env", "novalue"}, 2, "want KEY=VALUE"},
		{[]string{"serve", "--protocol", "nope"}, 2, `unknown protocol "nope"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(t.Context(), tt.args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
			if code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
				t.Errorf("code %d, stderr %q; want %d containing %q", code, stderr.String(), tt.code, tt.msg)
			}
		})
	}
}

func TestTerminalURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4000":     "ws://127.0.0.1:4000/api/terminal",
		"https://x.example/":        "wss://x.example/api/terminal",
		"ws://h:1/api/terminal":     "ws://h:1/api/terminal",
		"http://h/_proliferate/mcp": "ws://h/_proliferate/mcp/api/terminal",
	} {
		if got := terminalURL(in); got != want {
			t.Errorf("terminalURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestSandboxPath(t *testing.T) {
	tests := []struct {
		in     string
		id, p  string
		inside bool
	}{
		{"sb-1:/home/user/x", "sb-1", "/home/user/x", true},
		{"./local:file", "", "", false},
		{"/abs/path", "", "", false},
		{"sb-1:relative", "", "", false},
		{"-", "", "", false},
	}
	for _, tt := range tests {
		id, p, ok := sandboxPath(tt.in)
		if id != tt.id || p != tt.p || ok != tt.inside {
			t.Errorf("sandboxPath(%q) = %q %q %v", tt.in, id, p, ok)
		}
	}
}

func FuzzSandboxPath(f *testing.F) {
	for _, s := range []string{"sb-1:/home/user/x", "./a:b", "-", ":/x", "a:/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, p, ok := sandboxPath(s)
		if !ok {
			if id != "" || p != "" {
				t.Fatalf("sandboxPath(%q) = %q %q without ok", s, id, p)
			}
			return
		}
		if id == "" || !strings.HasPrefix(p, "/") || strings.Contains(id, "/") || id+":"+p != s {
			t.Fatalf("sandboxPath(%q) = %q %q", s, id, p)
		}
	})
}

// serve hands the local engine and the address to the registered protocol server.
func TestServeRegistry(t *testing.T) {
	requireNamespaces(t)
	bins := buildBinaries(t)
	var got serveOptions
	serveProtocols["test-proto"] = func(ctx context.Context, o serveOptions) error {
		got = o
		o.Ready(o.Addr)
		_, err := o.Engine.List(ctx)
		return err
	}
	defer delete(serveProtocols, "test-proto")
	dir := t.TempDir()
	env := map[string]string{"SANDBOXCTL_SANDBOX_MCP": filepath.Join(bins, "sandbox-mcp"), "SANDBOXCTL_DATA_DIR": dir}
	var stdout, stderr strings.Builder
	code := run(t.Context(), []string{"serve", "--protocol", "test-proto", "--addr", "127.0.0.1:9"},
		func(k string) string { return env[k] }, strings.NewReader(""), &stdout, &stderr)
	if code != 0 || got.Engine == nil || got.Addr != "127.0.0.1:9" || got.DataDir != dir {
		t.Fatalf("serve = %d %q, options %+v", code, stderr.String(), got)
	}
	if !strings.Contains(stderr.String(), "serving test-proto on 127.0.0.1:9") {
		t.Errorf("stderr = %q, want the ready line", stderr.String())
	}
}
