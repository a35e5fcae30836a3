package e2btest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// The tests that boot from an image use imagetest.PlanImage (image.Default without
// our binaries, which the engine binds in, plus a marker file), the same image the
// local engine's and the providers' tests boot: its steps are cached by content key
// in the shared store, so the apt step runs once per machine for all of them.
const (
	// MarkerPath holds Marker in the test image and nowhere else: a sandbox that
	// reads it runs on the image's root, not on the engine's default root.
	MarkerPath = imagetest.PlanMarkerPath
	Marker     = imagetest.PlanMarker
)

// bootImage builds (or finds cached) the test image in s, running its steps in
// sandboxes of eng, and returns its id.
func bootImage(t testing.TB, eng *local.Engine) string {
	t.Helper()
	_, id := imagetest.Default(t, func(testing.TB, *store.Store) build.BuildEngine { return eng })
	return id
}

// snapshotStore is the shared store as the engine's images, keeping the ids of the
// images it commits (the snapshots of image sandboxes) to remove them at the end:
// the shared store keeps only what every run reuses.
type snapshotStore struct {
	*store.Store
	mu  sync.Mutex
	ids []string
}

var _ engine.ImageCommitter = (*snapshotStore)(nil)

// CommitImage commits and records the new image.
func (s *snapshotStore) CommitImage(ctx context.Context, parent, dir string, idBase, idCount int) (string, error) {
	id, err := s.Store.CommitImage(ctx, parent, dir, idBase, idCount)
	if err == nil {
		s.mu.Lock()
		s.ids = append(s.ids, id)
		s.mu.Unlock()
	}
	return id, err
}

// removeCommitted removes the committed images, the last first (a snapshot of a
// sandbox booted from a snapshot is the child of that snapshot).
func (s *snapshotStore) removeCommitted(t testing.TB) {
	s.mu.Lock()
	ids := slices.Clone(s.ids)
	s.mu.Unlock()
	for _, id := range slices.Backward(ids) {
		if _, err := s.Remove(context.Background(), id); err != nil && !errors.Is(err, engine.ErrNotFound) {
			t.Logf("remove snapshot image %s: %v", id, err)
		}
	}
}

// MarkerCommand prints Marker on a root that has it and "no marker" on any other.
const MarkerCommand = "cat " + MarkerPath + " 2>/dev/null || echo no marker"

// CheckBootsImage fails the test unless a sandbox of the template base runs on
// the test image's root (its marker file); the sandbox is killed afterwards.
func (s *Server) CheckBootsImage(t testing.TB) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, e2bwire.NewSandbox{TemplateID: "base", Timeout: 120, Secure: true})
	if err != nil {
		t.Fatalf("create a sandbox of template base: %v", err)
	}
	defer c.Kill(context.WithoutCancel(ctx), sb.SandboxID)
	r, err := c.Envd(sb).Run(ctx, MarkerCommand, e2b.RunOptions{})
	if err != nil || r.Stdout != Marker+"\n" {
		t.Errorf("%s in a sandbox of template base = %+v, %v; want %q (the test image's root, not the engine's default)", MarkerCommand, r, err, Marker)
	}
}
