package runplantest

import (
	"context"
	"errors"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// localImageTarget is localTarget on the boot plan's test image (imagetest.Default):
// the plan must behave the same on the image's programs as on the host's. It fails
// t unless the sandbox holds the image's marker.
func localImageTarget(ctx context.Context, t *testing.T, eo local.EngineOptions) provider.Target {
	s, id := imagetest.Default(t, func(t testing.TB, s *store.Store) build.BuildEngine {
		e, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir(), Images: s})
		if errors.Is(err, engine.ErrNotIsolated) {
			t.Skip(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	})
	eo.Images = s
	tg := bootTarget(ctx, t, "local-image", engineFor(t, eo), provider.Options{Kind: provider.KindLocal}, engine.Spec{Image: id})
	if got, err := tg.ReadFile(ctx, imagetest.PlanMarkerPath); err != nil || string(got) != imagetest.PlanMarker+"\n" {
		t.Fatalf("local-image: the sandbox lacks the image's marker (%q, %v): not booted from it", got, err)
	}
	return tg
}
