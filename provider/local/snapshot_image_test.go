package local

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

func imageEngine(t testing.TB) (*Engine, *store.Store, string) {
	t.Helper()
	s, base := imagetest.Base(t)
	e, err := NewEngine(EngineOptions{DataDir: t.TempDir(), Images: s, SandboxMCP: sandboxMCP})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, s, base
}

// TestSnapshotIsImage: a snapshot of a sandbox booted from an image is an image on top
// of it; a new sandbox booted from it (as Spec.Image or Spec.Snapshot) has the files,
// and a volume's contents were not captured.
func TestSnapshotIsImage(t *testing.T) {
	e, s, base := imageEngine(t)
	var vol engine.VolumeMount
	if e.Capabilities().Volumes {
		createVolume(t, e, "kept-out", 16<<20)
		vol = engine.VolumeMount{Name: "kept-out", Target: "/data"}
	}
	spec := engine.Spec{Image: base}
	if vol.Name != "" {
		spec.Volumes = []engine.VolumeMount{vol}
	}
	a := createBox(t, e, spec)
	script := "echo kept > /home/user/f && echo etc > /etc/added && rm /etc/issue && mkdir -p /data && echo vol > /data/v"
	if out, code := sh(t, e, a.ID, "sh", "-c", script); code != 0 {
		t.Fatalf("write = %q, %d", out, code)
	}
	id, err := e.Snapshot(t.Context(), a.ID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Remove(context.Background(), id) })
	in, err := s.Get(t.Context(), id)
	if err != nil || in.Parent != base {
		t.Fatalf("the snapshot in the store = %+v, %v; want an image on %s", in, err, base)
	}
	for _, spec := range []engine.Spec{{Image: id}, {Snapshot: id}} {
		b := createBox(t, e, spec)
		if b.Image != id {
			t.Errorf("Create(%+v).Image = %q, want %q", spec, b.Image, id)
		}
		out, _ := sh(t, e, b.ID, "sh", "-c", "cat /home/user/f /etc/added; test -e /etc/issue && echo issue; cat /data/v 2>&1 || true; stat -c %U /home/user/f")
		if !strings.HasPrefix(out, "kept\netc\n") || strings.Contains(out, "issue") || strings.Contains(out, "vol\n") || !strings.HasSuffix(out, "root\n") {
			t.Errorf("from the snapshot = %q; want its files, the deletion, no volume data, root's owner", out)
		}
	}
}

// BenchmarkSnapshotImage100MB: the snapshot of an image sandbox with 100 MB changed.
func BenchmarkSnapshotImage100MB(b *testing.B) {
	e, s, base := imageEngine(b)
	box, err := e.Create(b.Context(), engine.Spec{Image: base})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Terminate(context.Background(), box.ID)
	if code, err := e.Exec(b.Context(), box.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "head -c 100000000 /dev/urandom > /home/user/big"}}); err != nil || code != 0 {
		b.Fatal(code, err)
	}
	for i := 0; b.Loop(); i++ {
		// A change per round, so each snapshot is an image of its own.
		b.StopTimer()
		e.Exec(b.Context(), box.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "echo " + strings.Repeat("x", i+1) + " > /home/user/round"}})
		b.StartTimer()
		id, err := e.Snapshot(b.Context(), box.ID)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Remove(context.Background(), id)
		b.StartTimer()
	}
}

// BenchmarkCreateFromSnapshotImage and BenchmarkCreateFromBaseImage: create until the
// sandbox serves exec, from a snapshot image (one more layer) and from its base.
func BenchmarkCreateFromSnapshotImage(b *testing.B) { benchCreateImage(b, true) }

// BenchmarkCreateFromBaseImage is the baseline of BenchmarkCreateFromSnapshotImage.
func BenchmarkCreateFromBaseImage(b *testing.B) { benchCreateImage(b, false) }

func benchCreateImage(b *testing.B, snapshot bool) {
	e, s, ref := imageEngine(b)
	if snapshot {
		box, err := e.Create(b.Context(), engine.Spec{Image: ref})
		if err != nil {
			b.Fatal(err)
		}
		e.Exec(b.Context(), box.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "echo x > /home/user/f"}})
		ref, err = e.Snapshot(b.Context(), box.ID)
		e.Terminate(context.Background(), box.ID)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Remove(context.Background(), ref)
	}
	for b.Loop() {
		info, err := e.Create(b.Context(), engine.Spec{Image: ref})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		e.Terminate(context.Background(), info.ID)
		b.StartTimer()
	}
}
