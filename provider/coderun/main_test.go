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
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// The tests share one local engine and one runner data dir, so the dependency
// snapshot is built once per test binary. Each test makes its own Runner. Where the
// shared test image store can be had (root and mmdebstrap; required in CI), the engine
// boots images and the runners build the dependency snapshot as an image in it;
// newCopyRunner makes a runner of the copy-snapshot path on the same engine.
var (
	fixtureDir    string
	fixtureEng    *local.Engine
	fixtureImages *store.Store
	engErr        error
	engOnce       sync.Once
)

func TestMain(m *testing.M) {
	local.MaybeRunInit()
	dir, err := os.MkdirTemp("", "coderun-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = dir
	code := m.Run()
	if fixtureImages != nil {
		removeNewDepsImages()
	}
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
		// Volumes stay mounted on the host until removed: remove every one, so the
		// data dir can go, and fail if a test left any.
		vols, _ := fixtureEng.ListVolumes(ctx)
		var leftVols []string
		for _, v := range vols {
			leftVols = append(leftVols, v.Name)
			if err := fixtureEng.RemoveVolume(ctx, v.Name); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
		fixtureEng.Close()
		if len(left) > 0 {
			fmt.Fprintf(os.Stderr, "sandboxes left running by the tests: %v\n", left)
			code = 1
		}
		if len(leftVols) > 0 {
			fmt.Fprintf(os.Stderr, "volumes left by the tests: %v\n", leftVols)
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

// needRuntime skips a test without npm (outside CI), fails it within a minute when
// the npm registry does not answer, and returns the shared engine.
func needRuntime(t testing.TB) *local.Engine {
	t.Helper()
	npm := testutil.NeedCommand(t, "npm", "it fetches Deno")
	regOnce.Do(func() { regErr = probeRegistries(npm) })
	if regErr != nil {
		t.Fatal(regErr)
	}
	var images *store.Store
	if os.Geteuid() == 0 && (os.Getenv("CI") != "" || hasMmdebstrap()) {
		images, _ = imagetest.Base(t)
	}
	engOnce.Do(func() {
		o := local.EngineOptions{DataDir: filepath.Join(fixtureDir, "engine")}
		if images != nil {
			o.Images, fixtureImages = images, images
			fixtureDepsImages = depsImages(images)
		}
		fixtureEng, engErr = local.NewEngine(o)
	})
	if errors.Is(engErr, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", engErr)
	}
	if engErr != nil {
		t.Fatal(engErr)
	}
	return fixtureEng
}

// regOnce probes the registries once per test binary; regErr is its answer.
var (
	regOnce sync.Once
	regErr  error
)

// probeRegistries asks the registry the host's npm installs Deno from, and the one
// the build sandbox's deno install reaches (registryHost), for an answer: without the
// network the tests fail within a minute naming the host instead of waiting out
// npm's and Deno's retries.
func probeRegistries(npm string) error {
	ctx := context.Background()
	registry, err := testutil.NPMRegistry(ctx, npm)
	if err != nil {
		return err
	}
	for _, u := range []string{registry, "https://" + registryHost + "/"} {
		if err := testutil.Reach(ctx, u, testutil.ReachTimeout); err != nil {
			return fmt.Errorf("code execution installs Deno and its packages from npm: %w", err)
		}
	}
	return nil
}

// testConfig is the acceptance configuration: small npm packages, one with a secret
// and a host, and ms with its type declarations (@types/ms) for the packages' docs.
func testConfig(t testing.TB, extra string) Config {
	t.Helper()
	return secretConfig(t, extra, "api.example.test", testSecret)
}

// secretConfig is testConfig with the secret (CODERUN_TEST_TOKEN) sent to host, its
// value value.
func secretConfig(t testing.TB, extra, host, value string) Config {
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
hosts = ["`+host+`"]

[[sandbox.dependencies]]
package = "ms"
version = "2.1.3"

[[sandbox.dependencies]]
package = "@types/ms"
version = "2.1.0"
`), func(k string) string {
		if k == "CODERUN_TEST_TOKEN" {
			return value
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const testSecret = "tok-7f3a9c1e5b"

func hasMmdebstrap() bool {
	_, err := exec.LookPath("mmdebstrap")
	return err == nil
}

// fixtureDepsImages are the ids of the deps-* images the shared store had before the
// tests; depsNames are the names of the dependency images the tests' runners use.
var (
	fixtureDepsImages map[string]bool
	depsMu            sync.Mutex
	depsNames         = map[string]bool{}
)

// depsImages are the ids of the store's deps-* images.
func depsImages(s *store.Store) map[string]bool {
	list, _ := s.List(context.Background())
	m := map[string]bool{}
	for _, in := range list {
		for _, n := range in.Names {
			if strings.HasPrefix(n, "deps-") {
				m[in.ID] = true
			}
		}
	}
	return m
}

// removeNewDepsImages removes the dependency images the tests built from the shared
// store (the next test binary builds its own, as it would a copy snapshot). Only the
// names of this binary's runners: another test binary may be using its own.
func removeNewDepsImages() {
	depsMu.Lock()
	defer depsMu.Unlock()
	for name := range depsNames {
		in, err := fixtureImages.Get(context.Background(), name)
		if err != nil || fixtureDepsImages[in.ID] {
			continue
		}
		if _, err := fixtureImages.Remove(context.Background(), in.ID); err != nil {
			fmt.Fprintln(os.Stderr, "remove dependency image:", err)
		}
	}
}

// newRunner makes a Runner on the shared engine (unless o.Engine wraps it) and data
// dir, with the engine's image store when it boots images; progress and logs go to
// buffers the caller may inspect.
func newRunner(t testing.TB, c Config, o Options) (*Runner, *strings.Builder) {
	t.Helper()
	needRuntime(t)
	if fixtureImages != nil {
		o.Images = fixtureImages
	}
	return newCopyRunner(t, c, o)
}

// newCopyRunner is newRunner without the image store unless o has one: the dependency
// snapshot is a copy snapshot.
func newCopyRunner(t testing.TB, c Config, o Options) (*Runner, *strings.Builder) {
	t.Helper()
	eng := needRuntime(t)
	var progress strings.Builder
	o.Config, o.DataDir = c, filepath.Join(fixtureDir, "runner")
	if o.Engine == nil {
		o.Engine = eng
	}
	if o.Progress == nil {
		o.Progress = &syncWriter{w: &progress}
	}
	r, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.imageStore() != nil {
		depsMu.Lock()
		depsNames[r.SnapshotName()] = true
		depsMu.Unlock()
	}
	t.Cleanup(func() { r.Close() })
	t.Cleanup(func() { sweep(t, r) })
	return r, &progress
}

// sweep runs Cleanup as if everything were long unused: the runner's idle sandboxes,
// spares and volumes go, with their registry rows. It runs before the runner closes
// (and after the sessions' own cleanups), so every test removes the volumes it made.
func sweep(t testing.TB, r *Runner) {
	t.Helper()
	if _, err := r.Cleanup(context.Background(), time.Now().Add(24*time.Hour), time.Nanosecond); err != nil {
		t.Errorf("sweep: %v", err)
	}
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

// volumeFile reads a file of a session volume through a sandbox of its own that
// mounts the volume (not the session's): what the engine holds, whatever the host
// layout.
func volumeFile(t *testing.T, r *Runner, vol, name string) (string, error) {
	t.Helper()
	ctx := context.Background()
	spec := engine.Spec{Labels: map[string]string{"coderun-test": "probe"}}
	if r.volumes() != nil {
		spec.Volumes = []engine.VolumeMount{{Name: vol, Target: "/probe"}}
	} else {
		spec.Mounts = []engine.Mount{{Source: r.hostVolume(vol), Target: "/probe"}}
	}
	info, err := r.eng.Create(ctx, spec)
	if err != nil {
		t.Fatalf("probe sandbox for volume %s: %v", vol, err)
	}
	defer func() {
		if err := r.eng.Terminate(ctx, info.ID); err != nil {
			t.Errorf("terminate the probe: %v", err)
		}
	}()
	b, err := r.eng.ReadFile(ctx, info.ID, "/probe/"+name)
	return string(b), err
}
