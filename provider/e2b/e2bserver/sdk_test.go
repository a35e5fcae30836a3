package e2bserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
)

// sdkDirs are the SDK versions the conformance script runs with: pinned/ is e2b
// 2.45.0 (package-lock.json), the last release on the v1 create and connect routes;
// latest/ is whatever the registry serves as latest (npm install e2b@latest, on the
// first run of a checkout).
var sdkDirs = []string{"pinned", "latest"}

// sdkInstall serialises installSDK's installs.
var sdkInstall sync.Mutex

// installSDK installs the SDK of testdata/js/<name> when it is missing and returns
// the directory; it skips without node and npm (fails under $CI). Without the
// network its first install fails within a minute naming the registry.
func installSDK(t testing.TB, name string) (node, dir string) {
	t.Helper()
	node = testutil.NeedCommand(t, "node", "the official E2B JS SDK tests need node >= 20 and npm")
	npm := testutil.NeedCommand(t, "npm", "the official E2B JS SDK tests need node >= 20 and npm")
	dir, err := filepath.Abs(filepath.Join("testdata", "js", name))
	if err != nil {
		t.Fatal(err)
	}
	sdkInstall.Lock() // parallel tests wait for one install
	defer sdkInstall.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "e2b", "package.json")); err == nil {
		return node, dir
	}
	testutil.RequireNPMRegistry(t, "npm install of the E2B JS SDK ("+name+")")
	args := []string{"ci", "--no-audit", "--no-fund", "--ignore-scripts"}
	if name == "latest" {
		args = []string{"install", "--no-save", "--no-package-lock", "--no-audit", "--no-fund", "--ignore-scripts", "e2b@latest"}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return node, dir
}

// conformance is the conformance script's final line.
type conformance struct {
	Version string `json:"version"`
	Steps   map[string]struct {
		OK     bool `json:"ok"`
		Detail any  `json:"detail"`
	} `json:"steps"`
	Methods  map[string][]string `json:"methods"`
	Refusals map[string]string   `json:"refusals"`
	Figures  map[string]float64  `json:"figures"`
}

// runConformance runs testdata/js/conformance.mjs with the SDK in dir against srv.
func runConformance(t testing.TB, node, dir string, srv *e2btest.Server, figures int) conformance {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "conformance.mjs", dir)
	cmd.Dir = filepath.Dir(dir)
	cmd.Env = append(os.Environ(), "E2B_API_KEY="+e2btest.APIKey, "E2B_API_URL="+srv.URL,
		"E2B_SANDBOX_URL="+srv.URL, "E2B_DOMAIN=localhost", "E2B_DEBUG=false",
		"E2B_CONFORMANCE_FIGURES="+strconv.Itoa(figures), "E2B_LOCAL_VOLUMES="+strconv.FormatBool(srv.Engine != nil && srv.Engine.Capabilities().Volumes))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node conformance.mjs %s: %v\nstdout: %s\nstderr: %s", dir, err, out, stderr.String())
	}
	var got conformance
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "STEP ") || strings.HasPrefix(line, "REFUSED ") {
			t.Log(line)
			continue
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("decode %q: %v\nstderr: %s", line, err, stderr.String())
		}
	}
	return got
}

// requiredSteps is the acceptance sequence; every step of the script must pass, and
// these must have run.
var requiredSteps = []string{"create", "timeout+info", "commands.env", "commands.stream", "commands.exitCode", "commands.timeout",
	"commands.stdin", "commands.list+kill", "files.write+read", "files.writeMany", "files.list+info",
	"files.makeDir+exists", "files.rename", "files.remove", "files.watchDir", "files.signedUrls", "files.readMissing", "getHost.get", "list.filters",
	"pty", "pause+connect", "snapshot", "fork", "kill"}

// TestOfficialJSSDK runs the conformance script with each SDK version against the
// server, and checks docs/e2b.md's table against each SDK's method list; the latest
// SDK runs it once more with the template base booting the test image.
func TestOfficialJSSDK(t *testing.T) {
	t.Parallel()
	type run struct {
		sdk   string
		image bool // the template base boots imagetest.PlanImage
	}
	var runs []run
	for _, name := range sdkDirs {
		runs = append(runs, run{sdk: name})
	}
	runs = append(runs, run{sdkDirs[len(sdkDirs)-1], true})
	for _, r := range runs {
		name := r.sdk
		if r.image {
			name += "-image"
		}
		t.Run(name, func(t *testing.T) {
			node, dir := installSDK(t, r.sdk)
			srv, _ := startWith(t, e2btest.Options{Image: r.image})
			if r.image {
				srv.CheckBootsImage(t)
			}
			got := runConformance(t, node, dir, srv, 0)
			t.Logf("e2b %s", got.Version)
			for _, s := range requiredSteps {
				st, ok := got.Steps[s]
				if !ok {
					t.Errorf("e2b %s: step %s did not run", got.Version, s)
				} else if !st.OK {
					t.Errorf("e2b %s: step %s failed: %v", got.Version, s, st.Detail)
				}
			}
			for s, st := range got.Steps {
				if !st.OK && !slices.Contains(requiredSteps, s) {
					t.Errorf("e2b %s: step %s failed: %v", got.Version, s, st.Detail)
				}
			}
			checkMethodTable(t, got)
		})
	}
}

// docRow matches a row of docs/e2b.md's SDK table: | `group.method` | status | … |.
var docRow = regexp.MustCompile("^\\| `((?:Sandbox|sandbox)\\.(?:[a-z]+\\.)?)([A-Za-z]+)\\(\\)` \\| (served|refused|n/a) \\|")

// checkMethodTable fails on an SDK method missing from docs/e2b.md's table.
func checkMethodTable(t *testing.T, got conformance) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "e2b.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if m := docRow.FindStringSubmatch(line); m != nil {
			listed[m[1]+m[2]] = true
		}
	}
	// The errors the docs quote are the ones the SDK shows.
	ids := regexp.MustCompile(`\bi[0-9a-f]{20}\b|\bnope\b`) // sandbox ids; the script's snapshot id
	for what, msg := range got.Refusals {
		quoted := ids.ReplaceAllString(msg, "<id>")
		if msg == "served" || !strings.Contains(string(b), quoted) {
			t.Errorf("e2b %s: %s shows %q, which docs/e2b.md does not quote (as %q)", got.Version, what, msg, quoted)
		}
	}
	if len(got.Methods) == 0 {
		t.Fatal("the script reported no SDK methods")
	}
	for group, names := range got.Methods {
		for _, n := range names {
			if !listed[group+n] {
				t.Errorf("e2b %s: %s%s() is not in docs/e2b.md's SDK table", got.Version, group, n)
			}
		}
	}
}

// BenchmarkJSSDK measures, with the latest SDK (median of 20): create → first
// command, a command's round trip, and file upload MB/s (16 MiB files).
func BenchmarkJSSDK(b *testing.B) {
	node, dir := installSDK(b, "latest")
	srv, _ := start(b)
	for range b.N {
		got := runConformance(b, node, dir, srv, 20)
		b.ReportMetric(got.Figures["createToFirstCommandMs"], "create-to-first-command-ms")
		b.ReportMetric(got.Figures["commandRoundTripMs"], "command-rtt-ms")
		b.ReportMetric(got.Figures["uploadMBps"], "upload-MB/s")
	}
}
