package modal

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestEngineVolumes: what the adapter adds to Modal Volumes (the contract's part is
// TestEngineContract/Volumes): a sandbox's mounts come back in Info.Volumes and not in
// its labels; a create that mounts a volume that does not exist is ErrNotFound and
// creates nothing; a taken name is ErrNameTaken; the data is the engine's volume (the
// local server's Modal Volume is the local engine's named volume).
func TestEngineVolumes(t *testing.T) {
	host := modaltest.NewImageEngine(t, local.EngineOptions{})
	_, env := imageServer(t, host)
	e := newProvider(t, env).Engine()
	e.image = BaseImage{Def: image.Image{From: imagetest.BaseRef}}
	ctx := t.Context()

	if _, err := e.CreateVolume(ctx, engine.VolumeSpec{Name: "data"}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateVolume(ctx, engine.VolumeSpec{Name: "data"}, false); !errors.Is(err, engine.ErrNameTaken) {
		t.Errorf("CreateVolume of a taken name = %v, want ErrNameTaken", err)
	}
	if v, err := e.GetVolume(ctx, "data"); err != nil || v.Name != "data" || time.Since(v.Created) > time.Minute || len(v.UsedBy) != 0 {
		t.Errorf("GetVolume = %+v, %v; want data, created just now, unused", v, err)
	}
	mounts := []engine.VolumeMount{{Name: "data", Target: "/mnt/data"}, {Name: "data", Target: "/mnt/ro", ReadOnly: true}}
	in, err := e.Create(ctx, engine.Spec{Volumes: mounts, Labels: map[string]string{"owner": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Terminate(ctx, in.ID)
	if diff := cmp.Diff(mounts, in.Volumes); diff != "" {
		t.Errorf("Info.Volumes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"owner": "test"}, in.Labels); diff != "" {
		t.Errorf("Info.Labels (-want +got):\n%s", diff)
	}
	if err := e.WriteFile(ctx, in.ID, "/mnt/data/f", []byte("on the volume"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := e.ReadFile(ctx, in.ID, "/mnt/ro/f"); err != nil || string(got) != "on the volume" {
		t.Errorf("ReadFile through the read-only mount = %q, %v", got, err)
	}
	vols, err := host.ListVolumes(ctx)
	if err != nil || len(vols) != 1 || vols[0].Labels["modal.volume_name"] != "data" || !slices.Contains(vols[0].UsedBy, engineID(t, host.Engine, in.ID)) {
		t.Errorf("the engine's volumes = %+v, %v; want data, used by the sandbox", vols, err)
	}

	before, _ := host.List(ctx)
	if _, err := e.Create(ctx, engine.Spec{Volumes: []engine.VolumeMount{{Name: "none", Target: "/mnt/none"}}}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Create mounting a missing volume = %v, want ErrNotFound", err)
	}
	if after, _ := host.List(ctx); len(after) != len(before) {
		t.Errorf("Create mounting a missing volume left a sandbox: %d before, %d after", len(before), len(after))
	}
	if err := e.RemoveVolume(ctx, "data"); !errors.Is(err, engine.ErrInUse) {
		t.Errorf("RemoveVolume while mounted = %v, want ErrInUse", err)
	}
	if err := e.Terminate(ctx, in.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveVolume(ctx, "data"); err != nil {
		t.Fatalf("RemoveVolume: %v", err)
	}
	if _, err := e.GetVolume(ctx, "data"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("GetVolume after RemoveVolume = %v, want ErrNotFound", err)
	}
	if err := e.RemoveVolume(ctx, "data"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("RemoveVolume of a missing volume = %v, want ErrNotFound", err)
	}
}
