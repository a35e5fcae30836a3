package modalserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// jsDir is the node project that pins the SDK: npm `modal` 0.11.1, the newest Modal
// SDK release the registry serves (its `latest` tag, 1.2.0, is an unrelated 2013
// browser package that once had the name).
func jsDir(t testing.TB) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the official JS SDK checks need node and npm", tool)
		}
	}
	dir, err := filepath.Abs("testdata/js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "modal", "package.json")); err != nil {
		// npm install --no-save keeps the lock file's pins and leaves it as it is;
		// unlike npm ci it accepts a lock without the platform-specific optional
		// packages that some registries and npm configurations leave out.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		ci := exec.CommandContext(ctx, "npm", "install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts")
		ci.Dir = dir
		if out, err := ci.CombinedOutput(); err != nil {
			t.Fatalf("npm install: %v\n%s", err, out)
		}
	}
	return dir
}

// jsStep is one line the conformance script prints.
type jsStep struct {
	Step    string          `json:"step"`
	OK      bool            `json:"ok"`
	Ms      int             `json:"ms"`
	Refused bool            `json:"refused"`
	Method  string          `json:"method"`
	Error   string          `json:"error"`
	Detail  json.RawMessage `json:"detail"`
	// Bench lines.
	Bench                  bool    `json:"bench"`
	Runs                   int     `json:"runs"`
	CreateToFirstCommandMs float64 `json:"createToFirstCommandMs"`
	CommandRoundTripMs     float64 `json:"commandRoundTripMs"`
	UploadMBps             float64 `json:"uploadMBps"`
}

// runJS serves a fresh server on the isolated local engine and runs the conformance
// script against it with extra environment.
func runJS(t testing.TB, extra ...string) []jsStep {
	dir := jsDir(t)
	eng := modaltest.Engine(t, local.EngineOptions{})
	url, srv := startServer(t, eng)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CACertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "conformance.mjs")
	node.Dir = dir
	node.Env = append(append(append(os.Environ(), modaltest.SDKEnv(t, url)...), "MODAL_TOKEN_ID="+testToken.ID,
		"MODAL_TOKEN_SECRET="+testToken.Secret, "TUNNEL_PORT="+strconv.Itoa(tunnelPort), "NODE_EXTRA_CA_CERTS="+ca), extra...)
	var stderr bytes.Buffer
	node.Stderr = &stderr
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node conformance.mjs: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	var steps []jsStep
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var s jsStep
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("conformance.mjs printed %q: %v\nstderr: %s", line, err, stderr.String())
		}
		steps = append(steps, s)
	}
	return steps
}

// TestJSSDK runs Modal's official JS SDK through what a user does, step by step
// (testdata/js/conformance.mjs): a sandbox with a command (its stdin, stdout, stderr),
// exec with env, exit codes, streaming, stdin, timeout and a PTY, the files API, a
// tunnel to an HTTP server inside, list with filters, fromName and fromId,
// snapshotFilesystem → images.fromId → create, terminate → wait() 137, timeout →
// wait() 124, a command's exit code; and the refusals (volumes on an engine without
// them, RUN steps, GPUs, queues, …) are clear errors naming the local server, with the
// text docs/modal.md gives for their method. It runs with the SDK's V2 sandbox calls
// (its default) and its V1 ones. Skipped only without node or npm.
func TestJSSDK(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) { testJSSDK(t, v2) })
	}
}

func testJSSDK(t *testing.T, v2 bool) {
	steps := runJS(t, fmt.Sprintf("MODAL_SANDBOX_V2=%v", v2))
	want := []string{"create with command, env, name, tags, timeout", "entrypoint stdin and stdout", "entrypoint stderr",
		"exec with env", "exec exit code and stderr", "exec streaming", "exec stdin", "exec timeout", "exec with pty", "files",
		"tunnel to an HTTP server inside", "list with filters, fromName, fromId", "snapshotFilesystem, images.fromId, create from it",
		"terminate, then wait() is 137", "exec after terminate is refused", "timeout, then wait() is 124", "command's own exit code", "readiness probe, waitUntilReady",
		"volumes", "image RUN steps"}
	got := map[string]jsStep{}
	for _, s := range steps {
		got[s.Step] = s
		if s.OK {
			t.Logf("ok   %-50s %5d ms %s%s", s.Step, s.Ms, s.Detail, s.Error)
		} else {
			t.Errorf("FAIL %s: %s", s.Step, s.Error)
		}
	}
	for _, w := range want {
		if _, ok := got[w]; !ok {
			t.Errorf("step %q did not run", w)
		}
	}
	if !v2 {
		return // the docs give the errors of the SDK's default, V2
	}
	table := docsTable(t)
	exercised := map[string]bool{}
	for _, s := range steps {
		exercised[s.Method] = true
	}
	for m, row := range table {
		if row.status == "refused" && !exercised[m] {
			t.Errorf("docs/modal.md lists %s as refused, but conformance.mjs does not check the error the SDK shows", m)
		}
	}
	for _, s := range steps {
		if !s.Refused || s.Method == "" {
			continue
		}
		row, ok := table[s.Method]
		if !ok || row.status != "refused" {
			t.Errorf("docs/modal.md does not list %s as refused (the SDK shows %q)", s.Method, s.Error)
			continue
		}
		if row.err == "" || !strings.Contains(s.Error, row.err) {
			t.Errorf("docs/modal.md gives %s the error %q; the SDK shows %q", s.Method, row.err, s.Error)
		}
	}
}

// BenchmarkJSSDK reports what a user of the JS SDK sees against the local server on
// the isolated local engine, as medians of 20 runs: create → first command done,
// one command's round trip (exec `true`, wait), and an 8 MiB file upload in MB/s.
func BenchmarkJSSDK(b *testing.B) {
	for b.Loop() {
		steps := runJS(b, "BENCH=20")
		s := steps[len(steps)-1]
		if !s.Bench {
			b.Fatalf("bench printed %+v", steps)
		}
		b.ReportMetric(s.CreateToFirstCommandMs, "create-to-first-command-ms")
		b.ReportMetric(s.CommandRoundTripMs, "command-round-trip-ms")
		b.ReportMetric(s.UploadMBps, "upload-MB/s")
	}
}
