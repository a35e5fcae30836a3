package store

import (
	"context"
	"fmt"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

var _ engine.ImageCommitter = (*Store)(nil)

// CommitImage stores a sandbox's upper layer dir as one layer on top of parent, with
// parent's configuration: a snapshot that is an image. The sandbox's host ids
// (idBase … idBase+idCount-1) go into the layer as the sandbox sees them.
func (s *Store) CommitImage(ctx context.Context, parent, dir string, idBase, idCount int) (string, error) {
	in, err := s.Get(ctx, parent)
	if err != nil {
		return "", fmt.Errorf("commit image: %w", err)
	}
	diff, err := s.CommitLayer(ctx, dir, CommitOptions{IDs: ShiftedIDs(idBase, idCount)})
	if err != nil {
		return "", fmt.Errorf("commit image: %w", err)
	}
	id, err := s.NewImage(ctx, ImageSpec{Parent: in.ID, Layers: []string{diff}, Config: in.Config, CreatedBy: "snapshot"})
	if err != nil {
		return "", fmt.Errorf("commit image: %w", err)
	}
	return id, nil
}

// ShiftedIDs maps host ids base … base+count-1 (a user namespace's range) back to
// 0 … count-1; other ids are kept.
func ShiftedIDs(base, count int) IDMap {
	return func(id int) int {
		if id >= base && id < base+count {
			return id - base
		}
		return id
	}
}
