package modalserver

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

const imagesFile = "modal-images.json"

type imageRecord struct {
	ID       string   `json:"id"`
	Tag      string   `json:"tag,omitempty"`
	Snapshot string   `json:"snapshot,omitempty"`
	Commands []string `json:"commands,omitempty"`
	Built    string   `json:"built,omitempty"`
}

func (s *Server) loadImages() error {
	if s.o.StateDir == "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(s.o.StateDir, imagesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var recs []imageRecord
	if err := json.Unmarshal(data, &recs); err != nil {
		return err
	}
	for _, r := range recs {
		if r.Snapshot == "" && r.Built == "" && s.canBuild() {
			// A stand-in kept by a server that did not build: this one builds it anew at
			// the next ImageGetOrCreate, so no sandbox boots the default root for it.
			continue
		}
		s.images[r.ID] = &image{id: r.ID, tag: r.Tag, snapshot: r.Snapshot, commands: r.Commands, built: r.Built}
	}
	return nil
}

// addImage records an image and, with a StateDir, writes the images file
// atomically (rules/atomicfile).
func (s *Server) addImage(img *image) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[img.id] = img
	if s.o.StateDir == "" {
		return nil
	}
	recs := make([]imageRecord, 0, len(s.images))
	for _, i := range s.images {
		recs = append(recs, imageRecord{ID: i.id, Tag: i.tag, Snapshot: i.snapshot, Commands: i.commands, Built: i.built})
	}
	data, err := json.Marshal(recs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.o.StateDir, 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(s.o.StateDir, imagesFile), data, 0o644)
}
