package local

import (
	"context"
	"sort"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// The engine's volumes are a volume.Store over DataDir/volumes; this file is
// the glue: engine.Volumes over the store, and which live sandbox mounts which volume
// (the store's users).

var _ engine.Volumes = (*Engine)(nil)

// CreateVolume makes a volume: a sparse image with an ext4 filesystem whose space for
// sandboxes is exactly the capacity.
func (e *Engine) CreateVolume(ctx context.Context, spec engine.VolumeSpec, ifMissing bool) (engine.VolumeInfo, error) {
	return e.vols.Create(ctx, spec, ifMissing)
}

// GetVolume describes one volume.
func (e *Engine) GetVolume(ctx context.Context, name string) (engine.VolumeInfo, error) {
	return e.vols.Get(ctx, name)
}

// ListVolumes describes every volume, by name.
func (e *Engine) ListVolumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	return e.vols.List(ctx)
}

// RemoveVolume deletes a volume that no live sandbox mounts.
func (e *Engine) RemoveVolume(ctx context.Context, name string) error {
	return e.vols.Remove(ctx, name)
}

// volumeUsers maps each volume name to the live sandboxes that mount it.
func (e *Engine) volumeUsers() map[string][]string {
	users := map[string][]string{}
	for _, bx := range e.all() {
		bx.mu.Lock()
		vols, id, pending := bx.st.Spec.Volumes, bx.st.ID, bx.pending
		bx.mu.Unlock()
		if len(vols) == 0 || (!pending && e.refresh(bx) == engine.StateDead) {
			continue
		}
		for _, v := range vols {
			users[v.Name] = append(users[v.Name], id)
		}
	}
	for _, ids := range users {
		sort.Strings(ids)
	}
	return users
}
