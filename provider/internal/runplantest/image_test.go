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
	p, err := local.New(local.Options{Root: t.TempDir(), SandboxMCP: eo.SandboxMCP, Proliferate: eo.Proliferate, Images: s, Image: id})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	res, err := p.CreateSandbox(ctx, provider.CreateOptions{SessionID: "runplan-local-image", Repos: []provider.RepoSpec{},
		EnvVars: map[string]string{provider.EnvSandboxMCPAuthToken: token}})
	if err != nil {
		t.Fatalf("local-image: CreateSandbox: %v", err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "", res.SandboxID) })
	if got, err := p.Engine().ReadFile(ctx, res.SandboxID, imagetest.PlanMarkerPath); err != nil || string(got) != imagetest.PlanMarker+"\n" {
		t.Fatalf("local-image: the sandbox lacks the image's marker (%q, %v): not booted from it", got, err)
	}
	tg, err := p.Target(ctx, res.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}
