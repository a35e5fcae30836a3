package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// planImage is the shared test image with what the boot plan runs (git, Caddy, sshd,
// the user account, …), without our binaries and with a marker file:
// imagetest.Default, built with sandboxes of this engine the first time on a machine.
func planImage(t testing.TB) (*store.Store, string) {
	t.Helper()
	return imagetest.Default(t, func(t testing.TB, s *store.Store) build.BuildEngine {
		e, err := NewEngine(EngineOptions{DataDir: t.TempDir(), Images: s})
		if errors.Is(err, engine.ErrNotIsolated) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	})
}

// rootKind is a root that a test's sandboxes boot on: the engine's default system
// root, or the boot plan's test image (planImage). Tests of what must hold on every
// root run once per kind.
type rootKind struct {
	name  string
	image bool
}

var rootKinds = []rootKind{{name: "system"}, {name: "image", image: true}}

// engine opens an isolated engine for the kind and returns the spec its sandboxes
// start from.
func (k rootKind) engine(t *testing.T) (*Engine, engine.Spec) {
	t.Helper()
	if !k.image {
		return newTestEngine(t), engine.Spec{}
	}
	s, id := planImage(t)
	e, err := NewEngine(EngineOptions{DataDir: t.TempDir(), SandboxMCP: sandboxMCP, Images: s})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, engine.Spec{Image: id}
}

// provider is newProvider for the kind: its sandboxes boot on the kind's root.
func (k rootKind) provider(t *testing.T, env map[string]string) *testProvider {
	t.Helper()
	o := testOptions{Root: t.TempDir(), SandboxMCP: sandboxMCP, Getenv: func(k string) string { return env[k] }}
	if k.image {
		s, id := planImage(t)
		o.Images, o.Image = s, id
		t.Cleanup(func() { removeSnapshotImages(t, s, o.Root) })
	}
	p := mustNew(t, o)
	t.Cleanup(func() { p.Close() })
	return p
}

// create is createBox on the kind's root with spec's other fields; it fails t unless
// an image sandbox runs on the image (it reports it and holds its marker), so a test
// over the kinds cannot pass on a silent fall back to the default root.
func (k rootKind) create(t *testing.T, e *Engine, base, spec engine.Spec) engine.Info {
	t.Helper()
	spec.Image = base.Image
	info := createBox(t, e, spec)
	k.check(t, e, info.ID, base.Image)
	return info
}

// check fails t unless the sandbox id runs on the kind's root: with an image, the
// engine reports image and the sandbox holds imagetest.PlanMarkerPath.
func (k rootKind) check(t *testing.T, e *Engine, id, image string) {
	t.Helper()
	info, err := e.Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.ReadFile(t.Context(), id, imagetest.PlanMarkerPath)
	onImage := err == nil && string(got) == imagetest.PlanMarker+"\n"
	if k.image && (!onImage || info.Image != image) {
		t.Fatalf("sandbox %s: image %q, marker %q (%v); want image %s and its marker: not booted from its image", id, info.Image, got, err, image)
	}
	if !k.image && (onImage || info.Image != "") {
		t.Fatalf("sandbox %s of the default root has an image (%q)", id, info.Image)
	}
}

// checkBoundBinary fails t unless the sandbox's image lacks sandbox-mcp and the
// engine bound the host's binary in at SandboxMCPPath.
func checkBoundBinary(t *testing.T, p *testProvider, id string) {
	t.Helper()
	fs, err := p.o.Images.ResolveImage(t.Context(), p.o.Image)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range fs.Layers {
		if _, err := os.Lstat(filepath.Join(l, SandboxMCPPath)); err == nil {
			t.Fatalf("layer %s has %s: the test image must lack it", l, SandboxMCPPath)
		}
	}
	host, err := exec.Command("sha256sum", sandboxMCP).Output()
	if err != nil {
		t.Fatal(err)
	}
	inside := execOut(t, p, id, "sha256sum", SandboxMCPPath)
	if h, _, _ := strings.Cut(string(host), " "); !strings.HasPrefix(inside, h+" ") {
		t.Errorf("%s inside = %q, want the host's binary (%s)", SandboxMCPPath, inside, h)
	}
}

// removeSnapshotImages removes from the shared store the images that the snapshots of
// image sandboxes of the provider on root committed (each has its folder under
// root/snapshots, for provider.json).
func removeSnapshotImages(t *testing.T, s *store.Store, root string) {
	entries, _ := os.ReadDir(filepath.Join(root, "snapshots"))
	for _, ent := range entries {
		if _, err := s.Get(context.Background(), ent.Name()); err != nil {
			continue // a copy snapshot, not an image
		}
		if _, err := s.Remove(context.Background(), ent.Name()); err != nil {
			t.Errorf("remove the snapshot image %s: %v", ent.Name(), err)
		}
	}
}
