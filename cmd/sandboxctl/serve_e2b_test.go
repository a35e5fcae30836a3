package main

import (
	"bufio"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// TestServeE2B runs `sandboxctl serve --protocol e2b` on a loopback port, drives it
// with the E2B client from the environment it prints, and opens `--provider e2b` on
// that environment.
func TestServeE2B(t *testing.T) {
	t.Parallel()
	exports := serveE2BEnv(t, t.TempDir())
	if !strings.HasPrefix(exports[e2b.EnvAPIURL], "http://127.0.0.1:") || !strings.HasPrefix(exports[e2b.EnvAPIKey], "e2b_") {
		t.Fatalf("printed environment = %v, want a loopback API URL and a key", exports)
	}
	// getHost's URLs work as they are: the domain carries the server's port.
	if want := "localhost:" + exports[e2b.EnvAPIURL][len("http://127.0.0.1:"):]; exports[e2b.EnvDomain] != want {
		t.Errorf("%s = %q, want %q", e2b.EnvDomain, exports[e2b.EnvDomain], want)
	}

	b, err := newE2BBackend(t.Context(), backendOptions{Getenv: func(k string) string { return exports[k] }})
	if err != nil {
		t.Fatal(err)
	}
	if !b.Provider.Health(t.Context()) {
		t.Error("the e2b provider on the served environment is not healthy")
	}
	ictx, icancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer icancel()
	in, err := b.Engine.Create(ictx, engineSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Engine.Terminate(context.Background(), in.ID)
	var out strings.Builder
	code, err := b.Engine.Exec(ictx, in.ID, execRequest([]string{"echo", "served"}, &out))
	if err != nil || code != 0 || out.String() != "served\n" {
		t.Errorf("exec through --provider e2b = %d, %q, %v", code, out.String(), err)
	}
	// E2B sets limits per template: a limit is refused before anything is made,
	// naming the flag and the provider.
	var stdout, stderr strings.Builder
	code = run(t.Context(), []string{"--provider", "e2b", "create", "--memory", "300M"}, func(k string) string { return exports[k] },
		strings.NewReader(""), &stdout, &stderr)
	if code == 0 || stdout.String() != "" || !strings.Contains(stderr.String(), "--memory") || !strings.Contains(stderr.String(), "e2b") {
		t.Errorf("-p e2b create --memory 300M = %d, %q, %q; want a refusal naming --memory and e2b", code, stdout.String(), stderr.String())
	}
	if list, err := b.Engine.List(t.Context()); err != nil || len(list) != 1 {
		t.Errorf("sandboxes after the refusal = %v, %v; want only the one of this test", list, err)
	}
	if _, err := newE2BBackend(t.Context(), backendOptions{Getenv: func(string) string { return "" }}); err == nil {
		t.Error("--provider e2b without E2B_API_KEY = nil error")
	}
}

// serveE2BEnv runs `sandboxctl serve --protocol e2b` with the data dir and extra args
// until the test ends, and returns the environment it prints.
func serveE2BEnv(t *testing.T, dataDir string, args ...string) map[string]string {
	t.Helper()
	if e, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir()}); err != nil {
		t.Skipf("the local engine cannot run here: %v", err)
	} else {
		e.Close()
	}
	bin := filepath.Join(testutil.Commands(t, "sandbox-mcp"), "sandbox-mcp")
	env := map[string]string{"SANDBOXCTL_SANDBOX_MCP": bin, "HOME": t.TempDir()}
	getenv := func(k string) string { return env[k] }
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"--data-dir", dataDir, "serve", "--protocol", "e2b", "--addr", "127.0.0.1:0"}, args...),
			getenv, strings.NewReader(""), pw, io.Discard)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited %d, want 0 after cancel", code)
		}
	})
	// The server prints `export NAME=VALUE` lines for the SDKs and --provider e2b.
	exports := map[string]string{}
	sc := bufio.NewScanner(pr)
	for len(exports) < 6 && sc.Scan() {
		if kv, ok := strings.CutPrefix(sc.Text(), "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			exports[k] = v
		}
	}
	go io.Copy(io.Discard, pr)
	return exports
}

func engineSpec() engine.Spec { return engine.Spec{} }

func execRequest(argv []string, out io.Writer) engine.ExecRequest {
	return engine.ExecRequest{Argv: argv, Stdout: out}
}
