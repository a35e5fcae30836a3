package build_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// writeRunner stands in for a build sandbox in tests of the builder's caching: it runs
// nothing, and makes a layer holding one file, /steps/<shell>, so each run step's
// layer is distinct. It records the commands it was asked to run.
type writeRunner struct {
	mu   sync.Mutex
	ran  []string
	temp string
}

func (r *writeRunner) Run(ctx context.Context, req build.RunRequest) (build.Layer, error) {
	r.mu.Lock()
	r.ran = append(r.ran, req.Shell)
	r.mu.Unlock()
	if len(req.Parent.Layers) == 0 {
		return build.Layer{}, errors.New("no parent layers")
	}
	dir, err := os.MkdirTemp(r.temp, "layer-")
	if err != nil {
		return build.Layer{}, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "steps"), 0o755); err != nil {
		return build.Layer{}, err
	}
	return build.Layer{Dir: dir}, os.WriteFile(filepath.Join(dir, "steps", req.Shell), []byte(req.Shell), 0o644)
}

func tinyBase(t *testing.T, s *store.Store) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4})
	tw.Write([]byte("tiny"))
	tw.Close()
	if _, err := s.ImportRootFS(t.Context(), &buf, "test:base", store.Config{Env: []string{"PATH=/bin"}}, "tiny"); err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	store  *store.Store
	runner *writeRunner
	src    image.Sources
}

func newFixture(t *testing.T) fixture {
	if os.Geteuid() != 0 {
		t.Skip("the image store needs root (layer owners, whiteouts)")
	}
	s, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tinyBase(t, s)
	ctx := t.TempDir()
	os.MkdirAll(filepath.Join(ctx, "conf"), 0o755)
	os.WriteFile(filepath.Join(ctx, "conf", "app.conf"), []byte("v1"), 0o640)
	bin := filepath.Join(ctx, "tool-bin")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o644)
	return fixture{store: s, runner: &writeRunner{temp: t.TempDir()},
		src: image.Sources{Context: ctx, Binaries: map[string]string{"tool": bin}}}
}

func (f fixture) build(t *testing.T, img image.Image) build.Result {
	t.Helper()
	var progress strings.Builder
	res, err := build.Build(t.Context(), img, build.Options{Store: f.store, Runner: f.runner, Sources: f.src, Progress: &progress})
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, progress.String())
	}
	return res
}

func testImage() image.Image {
	return image.Image{Name: "test:app", From: "test:base", Steps: []image.Step{
		image.Env("A", "1"),
		image.Copy("conf", "/etc/app"),
		image.Run("step-a"),
		image.Binary("tool"),
		image.WorkDir("/srv"),
		image.Run("step-b"),
	}, Cmd: []string{"tool"}}
}

// cachedSteps lists, per definition step, whether it came from the cache.
func cachedSteps(res build.Result) []bool {
	var c []bool
	for _, s := range res.Steps {
		if !s.Base && !s.Final {
			c = append(c, s.Cached)
		}
	}
	return c
}

func TestBuildIsCachedAndRebuildsFromTheChange(t *testing.T) {
	f := newFixture(t)
	first := f.build(t, testImage())
	if first.Built() != 7 || len(f.runner.ran) != 2 {
		t.Fatalf("first build did %d steps and ran %v; want 7 (6 steps and the final config) and both run steps", first.Built(), f.runner.ran)
	}
	second := f.build(t, testImage())
	if second.ID != first.ID || second.Built() != 0 || len(f.runner.ran) != 2 {
		t.Errorf("second build = %s with %d steps done, runner ran %v; want %s, nothing done", second.ID, second.Built(), f.runner.ran, first.ID)
	}
	for _, tc := range []struct {
		name   string
		change func(img *image.Image)
		cached []bool
		runs   []string
	}{
		{"run step", func(img *image.Image) { img.Steps[2] = image.Run("step-a2") },
			[]bool{true, true, false, false, false, false}, []string{"step-a2", "step-b"}},
		{"last step", func(img *image.Image) { img.Steps[5] = image.Run("step-b2") },
			[]bool{true, true, true, true, true, false}, []string{"step-b2"}},
		{"env", func(img *image.Image) { img.Steps[0] = image.Env("A", "2") },
			[]bool{false, false, false, false, false, false}, []string{"step-a", "step-b"}},
		{"copied file", func(*image.Image) {
			os.WriteFile(filepath.Join(f.src.Context, "conf", "app.conf"), []byte("v2"), 0o640)
		}, []bool{true, false, false, false, false, false}, []string{"step-a", "step-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.runner.ran = nil
			img := testImage()
			tc.change(&img)
			res := f.build(t, img)
			if got := cachedSteps(res); !slicesEqual(got, tc.cached) {
				t.Errorf("cached steps = %v, want %v", got, tc.cached)
			}
			if !slicesEqual(f.runner.ran, tc.runs) {
				t.Errorf("runner ran %q, want %q", f.runner.ran, tc.runs)
			}
		})
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestBuiltImage(t *testing.T) {
	f := newFixture(t)
	res := f.build(t, testImage())
	fs, err := f.store.ResolveImage(t.Context(), "test:app")
	if err != nil || fs.ID != res.ID {
		t.Fatalf("ResolveImage(test:app) = %+v, %v; want id %s", fs, err, res.ID)
	}
	// base + copy + run + binary + run: config steps make no layer.
	if len(fs.Layers) != 5 {
		t.Errorf("image has %d layers, want 5", len(fs.Layers))
	}
	if fs.WorkDir != "/srv" || strings.Join(fs.Env, " ") != "PATH=/bin A=1" {
		t.Errorf("config = workdir %q env %q", fs.WorkDir, fs.Env)
	}
	if b, err := os.ReadFile(filepath.Join(fs.Layers[1], "etc/app/app.conf")); err != nil || string(b) != "v1" {
		t.Errorf("copy layer etc/app/app.conf = %q, %v", b, err)
	}
	st, err := os.Stat(filepath.Join(fs.Layers[3], "usr/local/bin/tool"))
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("binary layer usr/local/bin/tool = %v, %v; want mode 0755", st, err)
	}
	in, _ := f.store.Get(t.Context(), res.ID)
	if strings.Join(in.Config.Cmd, " ") != "tool" {
		t.Errorf("Cmd = %q", in.Config.Cmd)
	}
}

func TestBuildErrors(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name string
		img  image.Image
		opts build.Options
		want error
	}{
		{"no runner", image.Image{From: "test:base", Steps: []image.Step{image.Run("x")}}, build.Options{Store: f.store}, build.ErrNoRunner},
		{"unknown base", image.Image{From: "alpine:3"}, build.Options{Store: f.store}, nil},
		{"missing binary", image.Image{From: "test:base", Steps: []image.Step{image.Binary("nope")}}, build.Options{Store: f.store}, nil},
		{"invalid", image.Image{From: "test:base", Steps: []image.Step{image.Run()}}, build.Options{Store: f.store}, image.ErrInvalid},
	} {
		_, err := build.Build(t.Context(), tc.img, tc.opts)
		if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: Build = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// BenchmarkCachedBuild measures a build whose every step is cached: the cost of
// `sandboxctl image build` when nothing changed (keys, cache lookups, tagging).
func BenchmarkCachedBuild(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the image store needs root")
	}
	s, err := store.Open(store.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.Close()
	if _, err := s.ImportRootFS(b.Context(), &buf, "test:base", store.Config{}, "tiny"); err != nil {
		b.Fatal(err)
	}
	ctx := b.TempDir()
	os.WriteFile(filepath.Join(ctx, "f"), []byte("x"), 0o644)
	runner := &writeRunner{temp: b.TempDir()}
	img := image.Image{Name: "bench", From: "test:base", Steps: []image.Step{
		image.Env("A", "1"), image.Copy("f", "/f"), image.Run("a"), image.Run("b"), image.WorkDir("/w"),
	}}
	opts := build.Options{Store: s, Runner: runner, Sources: image.Sources{Context: ctx}}
	first, err := build.Build(b.Context(), img, opts)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res, err := build.Build(b.Context(), img, opts)
		if err != nil || res.ID != first.ID || res.Built() != 0 {
			b.Fatalf("cached build = %s, %d steps built, %v", res.ID, res.Built(), err)
		}
	}
}
