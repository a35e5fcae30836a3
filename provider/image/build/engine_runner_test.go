package build_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestEngineRunner builds run steps in local-engine sandboxes on the Debian base: the
// layers hold what the steps changed with the sandbox's ids, deletions as whiteouts;
// a second build creates no sandbox; a changed last step rebuilds only itself.
func TestEngineRunner(t *testing.T) {
	s, _ := imagetest.Base(t)
	e, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir(), Images: s})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	runner := build.EngineRunner{Engine: e, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}
	uniq := strconv.FormatInt(time.Now().UnixNano(), 36) // keeps this run's keys out of the shared store's cache
	img := func(last string) image.Image {
		return image.Image{From: imagetest.BaseRef, Steps: []image.Step{
			image.Run("echo "+uniq+" > /opt/marker", "rm /etc/motd", "mkdir /opt/owned", "chown 1001:1001 /opt/owned"),
			image.Env("X", "1"),
			image.Run(last),
		}}
	}
	var progress strings.Builder
	opts := build.Options{Store: s, Runner: runner, Progress: &progress}
	res, err := build.Build(t.Context(), img("cat /opt/marker > /opt/copy && echo $X >> /opt/copy"), opts)
	if err != nil {
		t.Fatalf("Build: %v\n%s", err, progress.String())
	}
	t.Cleanup(func() { s.Remove(t.Context(), res.ID) })
	if res.Built() != 3 {
		t.Errorf("first build did %d steps, want 3:\n%s", res.Built(), progress.String())
	}
	fs, err := s.ResolveImage(t.Context(), res.ID)
	if err != nil || len(fs.Layers) != 3 {
		t.Fatalf("ResolveImage = %+v, %v; want the base and two run layers", fs, err)
	}
	first, last := fs.Layers[1], fs.Layers[2]
	var st syscall.Stat_t
	if b, err := os.ReadFile(filepath.Join(first, "opt/marker")); err != nil || string(b) != uniq+"\n" {
		t.Errorf("opt/marker = %q, %v", b, err)
	}
	// The layer records the sandbox's own ids (root 0, 1001); the store keeps its
	// folder owned by the sandboxes' host ids (store.LayerID).
	if err := syscall.Lstat(filepath.Join(first, "opt/marker"), &st); err != nil || int(st.Uid) != store.LayerID(0) || int(st.Gid) != store.LayerID(0) {
		t.Errorf("opt/marker owner = %d:%d, %v; want %d (the sandbox's root)", st.Uid, st.Gid, err, store.LayerID(0))
	}
	if err := syscall.Lstat(filepath.Join(first, "opt/owned"), &st); err != nil || int(st.Uid) != store.LayerID(1001) {
		t.Errorf("opt/owned owner = %d, %v; want %d", st.Uid, err, store.LayerID(1001))
	}
	if err := syscall.Lstat(filepath.Join(first, "etc/motd"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/motd is not a whiteout in the step's layer: %v, mode %o", err, st.Mode)
	}
	// What the engine made at boot (mount points, home, state folders) is not the step's.
	for _, p := range []string{"home", "tmp", "dev", "etc/hosts", "etc/hostname"} {
		if _, err := os.Lstat(filepath.Join(first, p)); err == nil {
			t.Errorf("the step's layer has %s, which the engine made at boot", p)
		}
	}
	if b, err := os.ReadFile(filepath.Join(last, "opt/copy")); err != nil || string(b) != uniq+"\n1\n" {
		t.Errorf("opt/copy = %q, %v; want the marker and $X from the env step", b, err)
	}
	again, err := build.Build(t.Context(), img("cat /opt/marker > /opt/copy && echo $X >> /opt/copy"), opts)
	if err != nil || again.ID != res.ID || again.Built() != 0 {
		t.Errorf("second build = %s, %d steps done, %v; want %s, none", again.ID, again.Built(), err, res.ID)
	}
	changed, err := build.Build(t.Context(), img("echo changed > /opt/copy"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Remove(t.Context(), changed.ID) })
	var cached []bool
	for _, st := range changed.Steps[1:] {
		cached = append(cached, st.Cached)
	}
	if want := []bool{true, true, false}; !slicesEqual(cached, want) {
		t.Errorf("after changing the last step, cached = %v, want %v", cached, want)
	}
	if list, _ := e.List(t.Context()); len(list) != 0 {
		t.Errorf("build sandboxes left behind: %+v", list)
	}
	if _, err := build.Build(t.Context(), image.Image{From: imagetest.BaseRef, Steps: []image.Step{image.Run("exit 3")}}, opts); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("a failing step = %v, want exit status 3", err)
	}
}

// BenchmarkEngineRunStep measures one run step in a local-engine build sandbox on the
// Debian base: create the sandbox, run the command, pack and unpack its layer, stop.
func BenchmarkEngineRunStep(b *testing.B) {
	s, _ := imagetest.Base(b)
	e, err := local.NewEngine(local.EngineOptions{DataDir: b.TempDir(), Images: s})
	if errors.Is(err, engine.ErrNotIsolated) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	opts := build.Options{Store: s, Runner: build.EngineRunner{Engine: e, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}}
	var ids []string
	for i := 0; b.Loop(); i++ {
		img := image.Image{From: imagetest.BaseRef, Steps: []image.Step{image.Run("echo " + strconv.FormatInt(time.Now().UnixNano(), 36) + " > /opt/x")}}
		res, err := build.Build(b.Context(), img, opts)
		if err != nil || res.Built() != 1 {
			b.Fatalf("Build = %d steps, %v", res.Built(), err)
		}
		ids = append(ids, res.ID)
	}
	b.StopTimer()
	for _, id := range ids {
		s.Remove(context.Background(), id)
	}
}
