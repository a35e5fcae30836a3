package e2b_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// TestEngineVolumes: the adapter's volumes over the local server's /volumes routes and
// volumeMounts: Get shows a sandbox's mounts; a volume's users come from the sandbox
// list (a paused one included); what E2B volumes lack (capacity, labels, read-only
// mounts) is reported or refused, never pretended; an unknown volume fails the create;
// a server without volumes is engine.ErrUnsupported.
func TestEngineVolumes(t *testing.T) {
	t.Parallel()
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP})
	eng, err := e2b.NewEngine(srv.Client(t), e2b.EngineOptions{Template: "base", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	v, err := eng.CreateVolume(ctx, engine.VolumeSpec{Name: "e2bvol", CapacityBytes: 64 << 20, Labels: map[string]string{"k": "v"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.RemoveVolume(context.Background(), "e2bvol") })
	if v.Name != "e2bvol" || v.CapacityBytes != 0 || v.Labels != nil {
		t.Errorf("CreateVolume = %+v, want the name and neither a capacity nor labels (E2B keeps none)", v)
	}
	if _, err := eng.CreateVolume(ctx, engine.VolumeSpec{Name: "e2bvol"}, false); !errors.Is(err, engine.ErrNameTaken) {
		t.Errorf("CreateVolume of an existing name = %v, want ErrNameTaken", err)
	}
	in, err := eng.Create(ctx, engine.Spec{Volumes: []engine.VolumeMount{{Name: "e2bvol", Target: "/workspace"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Terminate(context.Background(), in.ID) })
	want := []engine.VolumeMount{{Name: "e2bvol", Target: "/workspace"}}
	if got, err := eng.Get(ctx, in.ID); err != nil || !slices.Equal(got.Volumes, want) {
		t.Errorf("Get.Volumes = %+v, %v, want %+v", got.Volumes, err, want)
	}
	if err := eng.Pause(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := eng.GetVolume(ctx, "e2bvol"); err != nil || !slices.Equal(got.UsedBy, []string{in.ID}) {
		t.Errorf("GetVolume while its sandbox is paused = %+v, %v, want used by %s", got, err, in.ID)
	}
	if err := eng.RemoveVolume(ctx, "e2bvol"); !errors.Is(err, engine.ErrInUse) || !strings.Contains(err.Error(), in.ID) {
		t.Errorf("RemoveVolume of a mounted volume = %v, want ErrInUse naming %s", err, in.ID)
	}
	if _, err := eng.Create(ctx, engine.Spec{Volumes: []engine.VolumeMount{{Name: "e2bvol", Target: "/ro", ReadOnly: true}}}); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("Create with a read-only volume = %v, want ErrUnsupported", err)
	}
	if _, err := eng.Create(ctx, engine.Spec{Volumes: []engine.VolumeMount{{Name: "no-such-volume", Target: "/x"}}}); err == nil || !strings.Contains(err.Error(), "no-such-volume") {
		t.Errorf("Create with an unknown volume = %v, want an error naming it", err)
	}
	if err := eng.Terminate(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if err := eng.RemoveVolume(ctx, "e2bvol"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.GetVolume(ctx, "e2bvol"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("GetVolume after RemoveVolume = %v, want ErrNotFound", err)
	}
	if err := eng.RemoveVolume(ctx, "e2bvol"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("RemoveVolume of a removed volume = %v, want ErrNotFound", err)
	}

	bare := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP, NoVolumes: true})
	none, err := e2b.NewEngine(bare.Client(t), e2b.EngineOptions{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.CreateVolume(ctx, engine.VolumeSpec{Name: "x"}, true); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("CreateVolume on a server without volumes = %v, want ErrUnsupported", err)
	}
}
