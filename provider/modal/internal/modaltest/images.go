package modaltest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ImageEngine is the isolated local engine (Engine) booting images from the shared
// test image store (imagetest: its Debian base built once per machine). The images it
// commits — the snapshots of image sandboxes — are removed from the shared store at
// cleanup, after its sandboxes ended; the images they stand on stay (a named one, or
// one another image has as parent, is never removed).
type ImageEngine struct {
	*local.Engine
	// Store is the shared test image store the engine boots from.
	Store *store.Store

	mu    sync.Mutex
	snaps []string
}

// NewImageEngine is Engine with o.Images the shared test image store; it skips where
// the store cannot be built (no root, no mmdebstrap) as imagetest.Base does.
func NewImageEngine(t testing.TB, o local.EngineOptions) *ImageEngine {
	t.Helper()
	s, _ := imagetest.Base(t)
	ie := &ImageEngine{Store: s}
	// Registered before Engine's cleanup, so it runs after it (the sandboxes are gone).
	t.Cleanup(func() {
		ie.mu.Lock()
		defer ie.mu.Unlock()
		for _, id := range slices.Backward(ie.snaps) { // a snapshot of a snapshot first
			if _, err := s.Remove(context.Background(), id); err != nil && !errors.Is(err, engine.ErrNotFound) && !errors.Is(err, engine.ErrInUse) {
				t.Errorf("remove snapshot image %s: %v", id, err)
			}
		}
	})
	o.Images = s
	ie.Engine = Engine(t, o)
	return ie
}

// Snapshot is the engine's Snapshot, recording the image it committed.
func (e *ImageEngine) Snapshot(ctx context.Context, id string) (string, error) {
	snap, err := e.Engine.Snapshot(ctx, id)
	if err == nil {
		e.mu.Lock()
		e.snaps = append(e.snaps, snap)
		e.mu.Unlock()
	}
	return snap, err
}

// Runner runs image build steps in build sandboxes of the engine (build.EngineRunner).
func (e *ImageEngine) Runner() build.Runner {
	return build.EngineRunner{Engine: e.Engine, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}
}
