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
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// jsInstall serialises jsDir's install.
var jsInstall sync.Mutex

// jsDir is the node project that pins the SDK: npm `modal` 0.11.1, the newest Modal
// SDK release the registry serves (its `latest` tag, 1.2.0, is an unrelated 2013
// browser package that once had the name). Without the network its first install
// fails within a minute naming the registry.
func jsDir(t testing.TB) string {
	t.Helper()
	jsInstall.Lock() // parallel tests wait for one install
	defer jsInstall.Unlock()
	for _, tool := range []string{"node", "npm"} {
		testutil.NeedCommand(t, tool, "the official JS SDK checks need node and npm")
	}
	dir, err := filepath.Abs("testdata/js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "modal", "package.json")); err != nil {
		// npm install --no-save keeps the lock file's pins and leaves it as it is;
		// unlike npm ci it accepts a lock without the platform-specific optional
		// packages that some registries and npm configurations leave out.
		testutil.RequireNPMRegistry(t, "npm install of the Modal JS SDK")
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

// runJS serves a fresh server on eng and runs the conformance script against it with
// extra environment; ENGINE_VOLUMES tells the script whether eng has volumes.
func runJS(t testing.TB, eng engine.Engine, extra ...string) []jsStep {
	return runJSOn(t, Options{Engine: eng}, extra...)
}

// runJSOn is runJS on a server with o (Token and Logger are the tests').
func runJSOn(t testing.TB, o Options, extra ...string) []jsStep {
	dir := jsDir(t)
	url, srv := startServerWith(t, o)
	eng := o.Engine
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, srv.CACertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", "conformance.mjs")
	node.Dir = dir
	node.Env = append(append(append(os.Environ(), modaltest.SDKEnv(t, url)...), "MODAL_TOKEN_ID="+testToken.ID,
		"MODAL_TOKEN_SECRET="+testToken.Secret, "TUNNEL_PORT="+strconv.Itoa(tunnelPort), "NODE_EXTRA_CA_CERTS="+ca,
		fmt.Sprintf("ENGINE_VOLUMES=%v", eng.Capabilities().Volumes)), extra...)
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
// wait() 124, a command's exit code, a readiness probe; volumes (on the local engine,
// which has them where loop devices and e2fsprogs exist: a named volume kept across
// two sandboxes, left out of a snapshot, an ephemeral one, delete refused while
// mounted and served after); an image's RUN step run; and the refusals (GPUs, queues,
// …) are clear errors naming the local server, with the text docs/modal.md gives for
// their method. It runs on image-booted sandboxes (a server with an image builder on
// the shared test store), with the SDK's V2 sandbox calls (its default) and its V1
// ones; it runs the volume steps once more on the engine with its volumes hidden
// (Capabilities().Volumes false), where they are the refusals the docs give, and the
// image steps on a server without a builder, where RUN steps are refused. Skipped
// without node or npm (and the image runs where the test image store cannot be built).
//
// Each run has its own engine and server. The V2 run goes first and alone (it fills
// the store's build cache with the image steps); the other runs then go in parallel.
func TestJSSDK(t *testing.T) {
	t.Parallel()
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			if !v2 {
				t.Parallel()
			}
			// On image-booted sandboxes (the server builds debian:bookworm-slim from the
			// store's base), whose image has no node: the tunnel step's HTTP server is
			// this test binary (modaltest.ServeEnv).
			jsDir(t) // skips before the Debian base is built
			eng, b, _ := imageEngine(t)
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			testJSSDK(t, eng, v2, false, runJSOn(t, Options{Engine: eng, Builder: b}, fmt.Sprintf("MODAL_SANDBOX_V2=%v", v2),
				"TUNNEL_SERVER="+exe, "TUNNEL_SERVER_ENV="+modaltest.ServeEnv, "IMAGE_BUILDS=true"))
		})
	}
	t.Run("engine without volumes", func(t *testing.T) {
		t.Parallel()
		eng := noVolumes{modaltest.Engine(t, local.EngineOptions{})}
		testJSSDK(t, eng, true, true, runJS(t, eng, "ONLY=volumes"))
	})
	t.Run("no image builder", func(t *testing.T) {
		t.Parallel()
		// Without a builder, RUN steps and images the host cannot stand in for are
		// refused (the runs above build them).
		eng := modaltest.Engine(t, local.EngineOptions{})
		steps := runJS(t, eng, "ONLY=images")
		got := map[string]bool{}
		for _, s := range steps {
			got[s.Step] = true
			if s.OK {
				t.Logf("ok   %-60s %5d ms %s%s", s.Step, s.Ms, s.Detail, s.Error)
			} else {
				t.Errorf("FAIL %s: %s", s.Step, s.Error)
			}
		}
		for _, w := range []string{"image RUN steps", "registry image the host cannot stand in for"} {
			if !got[w] {
				t.Errorf("step %q did not run", w)
			}
		}
	})
}

// testJSSDK checks the steps of one run: every step passed, every step expected of the
// engine ran (only the volume steps when onlyVolumes), and, for V2, the docs table.
func testJSSDK(t *testing.T, eng engine.Engine, v2, onlyVolumes bool, steps []jsStep) {
	volumes := eng.Capabilities().Volumes
	var want []string
	if !onlyVolumes {
		want = []string{"create with command, env, name, tags, timeout", "entrypoint stdin and stdout", "entrypoint stderr",
			"exec with env", "exec exit code and stderr", "exec streaming", "exec stdin", "exec timeout", "exec with pty", "files",
			"tunnel to an HTTP server inside", "list with filters, fromName, fromId", "snapshotFilesystem, images.fromId, create from it",
			"terminate, then wait() is 137", "exec after terminate is refused", "timeout, then wait() is 124", "command's own exit code", "readiness probe, waitUntilReady",
			"image RUN steps"}
	}
	if volumes {
		want = append(want, "volumes.fromName (createIfMissing) kept across two sandboxes", "snapshotFilesystem leaves the volume out",
			"volumes.ephemeral mounted at create", "volumes.delete of a mounted volume is refused", "volumes.delete once no sandbox mounts it")
	} else {
		want = append(want, "volumes", "ephemeral volume", "volume delete")
	}
	got := map[string]jsStep{}
	for _, s := range steps {
		got[s.Step] = s
		if s.OK {
			t.Logf("ok   %-60s %5d ms %s%s", s.Step, s.Ms, s.Detail, s.Error)
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
	checkDocs(t, steps, volumes, onlyVolumes)
}

// checkDocs checks the steps against docs/modal.md's table on an engine with volumes
// or without: every method the table lists as refused there was checked refused, with
// the table's error; every method a step shows served is listed served there. A run of
// the volume steps alone checks only the rows that depend on volumes.
func checkDocs(t *testing.T, steps []jsStep, volumes, onlyVolumes bool) {
	table := docsTable(t)
	exercised := map[string]jsStep{}
	for _, s := range steps {
		if s.Method != "" {
			exercised[s.Method] = s
		}
	}
	for m, row := range table {
		if onlyVolumes && !row.needsVolumes {
			continue
		}
		s, ok := exercised[m]
		switch want := row.expect(volumes); {
		case want == "refused" && (!ok || !s.Refused):
			t.Errorf("docs/modal.md lists %s as refused (engine volumes: %v), but conformance.mjs does not check the error the SDK shows", m, volumes)
		case want == "served" && row.needsVolumes && (!ok || s.Refused):
			t.Errorf("docs/modal.md lists %s as served on an engine with volumes, but conformance.mjs does not show it served", m)
		}
	}
	for _, s := range steps {
		if s.Method == "" {
			continue
		}
		row, ok := table[s.Method]
		switch {
		case !ok:
			t.Errorf("docs/modal.md does not list %s", s.Method)
		case s.Refused && row.expect(volumes) != "refused":
			t.Errorf("docs/modal.md does not list %s as refused (engine volumes: %v; the SDK shows %q)", s.Method, volumes, s.Error)
		case s.Refused && (row.err == "" || !strings.Contains(s.Error, row.err)):
			t.Errorf("docs/modal.md gives %s the error %q; the SDK shows %q", s.Method, row.err, s.Error)
		case !s.Refused && row.expect(volumes) != "served":
			t.Errorf("conformance.mjs shows %s served; docs/modal.md lists it as %s (engine volumes: %v)", s.Method, row.expect(volumes), volumes)
		}
	}
}

// BenchmarkJSSDK reports what a user of the JS SDK sees against the local server on
// the isolated local engine, as medians of 20 runs: create → first command done,
// one command's round trip (exec `true`, wait), and an 8 MiB file upload in MB/s.
func BenchmarkJSSDK(b *testing.B) {
	for b.Loop() {
		steps := runJS(b, modaltest.Engine(b, local.EngineOptions{}), "BENCH=20")
		s := steps[len(steps)-1]
		if !s.Bench {
			b.Fatalf("bench printed %+v", steps)
		}
		b.ReportMetric(s.CreateToFirstCommandMs, "create-to-first-command-ms")
		b.ReportMetric(s.CommandRoundTripMs, "command-round-trip-ms")
		b.ReportMetric(s.UploadMBps, "upload-MB/s")
	}
}
