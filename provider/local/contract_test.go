package local

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/enginetest"
)

// withRuntime is the engine with every Create under one runtime.
type withRuntime struct {
	*Engine
	runtime string
}

func (w withRuntime) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	spec.Runtime = w.runtime
	return w.Engine.Create(ctx, spec)
}

// imageMarker is a file of the Debian base image that no sandbox without it has (a
// default root's /var is empty): the sandbox shows the layer's copy, or it did not
// boot from the image.
const imageMarker = "/var/lib/dpkg/status"

// withImage is withRuntime with every Create that names neither an image nor a
// snapshot booting from image. Each such sandbox must report the image and hold its
// marker (the layer's imageMarker), or the Create fails: a silent fall back to the
// default root cannot pass the suite.
type withImage struct {
	withRuntime
	image  string
	marker []byte
	snaps  *snapshots
}

// snapshots are the images the suite's snapshots committed to the shared store, to
// remove at the end.
type snapshots struct {
	mu  sync.Mutex
	ids []string
}

// Snapshot of an image sandbox commits an image to the shared test store; it is
// removed when the test ends.
func (w withImage) Snapshot(ctx context.Context, id string) (string, error) {
	sid, err := w.withRuntime.Snapshot(ctx, id)
	if err == nil {
		w.snaps.mu.Lock()
		w.snaps.ids = append(w.snaps.ids, sid)
		w.snaps.mu.Unlock()
	}
	return sid, err
}

func (w withImage) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	if spec.Image != "" || spec.Snapshot != "" {
		return w.withRuntime.Create(ctx, spec)
	}
	spec.Image = w.image
	in, err := w.withRuntime.Create(ctx, spec)
	if err != nil {
		return in, err
	}
	got, rerr := w.ReadFile(ctx, in.ID, imageMarker)
	switch {
	case in.Image != w.image:
		err = fmt.Errorf("sandbox %s reports image %q, want %q", in.ID, in.Image, w.image)
	case rerr != nil || !bytes.Equal(got, w.marker):
		err = fmt.Errorf("sandbox %s lacks the image's %s (%v): not booted from %s", in.ID, imageMarker, rerr, w.image)
	}
	if err != nil {
		_ = w.Terminate(context.WithoutCancel(ctx), in.ID)
		return engine.Info{}, err
	}
	return in, nil
}

// TestEngineContract runs the engine contract suite on the isolated local engine,
// once per runtime it offers, on the default root and with every sandbox booted
// from the Debian base image. (The unisolated engine is left out: its sandboxes'
// paths are the host's.)
func TestEngineContract(t *testing.T) {
	e := newTestEngine(t)
	for _, rt := range e.Capabilities().Runtimes {
		t.Run(rt, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) engine.Engine { return withRuntime{e, rt} })
		})
	}
	t.Run("image", func(t *testing.T) {
		ie, s, base := imageEngine(t)
		fs, err := s.ResolveImage(t.Context(), base)
		if err != nil {
			t.Fatal(err)
		}
		marker, err := os.ReadFile(filepath.Join(fs.Layers[0], imageMarker))
		if err != nil || len(marker) == 0 {
			t.Fatalf("the base image's %s: %q, %v", imageMarker, marker, err)
		}
		snaps := &snapshots{}
		t.Cleanup(func() {
			for _, id := range snaps.ids {
				if _, err := s.Remove(context.Background(), id); err != nil {
					t.Errorf("remove the snapshot image %s: %v", id, err)
				}
			}
		})
		for _, rt := range ie.Capabilities().Runtimes {
			t.Run(rt, func(t *testing.T) {
				enginetest.Run(t, func(t *testing.T) engine.Engine {
					return withImage{withRuntime{ie, rt}, fs.ID, marker, snaps}
				})
			})
		}
	})
}
