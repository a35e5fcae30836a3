package e2bserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// E2B's volumes are the engine's named volumes; a volume's id is its name (validated
// by rules.ValidateVolumeName), so an id is stable across restarts of this server and
// `sandboxctl volume list` shows the same volumes.

// hasVolumes reports whether the engine serves named volumes.
func (s *Server) hasVolumes() bool {
	_, err := s.engineVolumes()
	return err == nil
}

// engineVolumes is the engine's Volumes, or a refusal naming this server when the
// engine has none.
func (s *Server) engineVolumes() (engine.Volumes, error) {
	v, ok := s.o.Engine.(engine.Volumes)
	if !ok || !s.o.Engine.Capabilities().Volumes {
		return nil, &apiError{http.StatusNotImplemented, "volumes are not supported by the local E2B server on this engine"}
	}
	return v, nil
}

func errVolumeNotFound(id string) error {
	return &apiError{http.StatusNotFound, "volume " + id + " not found"}
}

// volumeToken is the token VolumeAndToken carries for id, made on first use; it
// authorizes nothing here (the volume content API is not served).
func (s *Server) volumeToken(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.volTokens == nil {
		s.volTokens = map[string]string{}
	}
	if s.volTokens[id] == "" {
		s.volTokens[id] = newID(16)
	}
	return s.volTokens[id]
}

func (s *Server) volumeAndToken(name string) e2bwire.VolumeAndToken {
	return e2bwire.VolumeAndToken{VolumeID: name, Name: name, Token: s.volumeToken(name)}
}

// lookupVolume gets the volume whose id is r's {volumeID}; an invalid id is not found.
func (s *Server) lookupVolume(r *http.Request) (engine.Volumes, string, error) {
	vols, err := s.engineVolumes()
	if err != nil {
		return nil, "", err
	}
	id := r.PathValue("volumeID")
	if rules.ValidateVolumeName(id) != nil {
		return nil, "", errVolumeNotFound(id)
	}
	if _, err := vols.GetVolume(r.Context(), id); errors.Is(err, engine.ErrNotFound) {
		return nil, "", errVolumeNotFound(id)
	} else if err != nil {
		return nil, "", fmt.Errorf("get volume: %w", err)
	}
	return vols, id, nil
}

// createVolume is POST /volumes: a new volume of the engine's default capacity; a
// name in use is 409.
func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) error {
	vols, err := s.engineVolumes()
	if err != nil {
		return err
	}
	var req e2bwire.NewVolume
	if err := decode(r, &req); err != nil {
		return err
	}
	if err := rules.ValidateVolumeName(req.Name); err != nil {
		return errBadRequest("%v", err)
	}
	if _, err := vols.CreateVolume(r.Context(), engine.VolumeSpec{Name: req.Name}, false); errors.Is(err, engine.ErrNameTaken) {
		return errConflict("volume " + req.Name + " already exists")
	} else if err != nil {
		return err
	}
	s.log.Info("volume created", "volume_id", req.Name)
	writeJSON(w, http.StatusCreated, s.volumeAndToken(req.Name))
	return nil
}

// listVolumes is GET /volumes.
func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) error {
	vols, err := s.engineVolumes()
	if err != nil {
		return err
	}
	infos, err := vols.ListVolumes(r.Context())
	if err != nil {
		return fmt.Errorf("list volumes: %w", err)
	}
	out := make([]e2bwire.Volume, 0, len(infos))
	for _, v := range infos {
		out = append(out, e2bwire.Volume{VolumeID: v.Name, Name: v.Name})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getVolume is GET /volumes/{volumeID}.
func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) error {
	_, id, err := s.lookupVolume(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.volumeAndToken(id))
	return nil
}

// destroyVolume is DELETE /volumes/{volumeID}: 204, 404 unknown, 409 while a sandbox
// mounts it (the engine's message names the sandboxes).
func (s *Server) destroyVolume(w http.ResponseWriter, r *http.Request) error {
	vols, id, err := s.lookupVolume(r)
	if err != nil {
		return err
	}
	if err := vols.RemoveVolume(r.Context(), id); errors.Is(err, engine.ErrNotFound) {
		return errVolumeNotFound(id)
	} else if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.volTokens, id)
	s.mu.Unlock()
	s.log.Info("volume destroyed", "volume_id", id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// parseMounts validates a create's volumeMounts: valid volume names at distinct
// absolute paths other than /, cleaned.
func parseMounts(ms []e2bwire.VolumeMount) ([]engine.VolumeMount, error) {
	out := make([]engine.VolumeMount, 0, len(ms))
	seen := map[string]bool{}
	for _, m := range ms {
		p := path.Clean(m.Path)
		if !path.IsAbs(m.Path) || p == "/" || strings.ContainsRune(m.Path, 0) {
			return nil, errBadRequest("volume mount path %q must be absolute and not /", m.Path)
		}
		if seen[p] {
			return nil, errBadRequest("two volumes mounted at %s", p)
		}
		seen[p] = true
		if rules.ValidateVolumeName(m.Name) != nil {
			return nil, errBadRequest("volume %q not found", m.Name)
		}
		out = append(out, engine.VolumeMount{Name: m.Name, Target: p})
	}
	return out, nil
}

// volumeMounts checks a create's volumeMounts (parseMounts) and that each volume
// exists. refuseV2 has already refused them on an engine without volumes.
func (s *Server) volumeMounts(ctx context.Context, ms []e2bwire.VolumeMount) ([]engine.VolumeMount, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	vols, err := s.engineVolumes()
	if err != nil {
		return nil, err
	}
	out, err := parseMounts(ms)
	if err != nil {
		return nil, err
	}
	for _, m := range out {
		if _, err := vols.GetVolume(ctx, m.Name); errors.Is(err, engine.ErrNotFound) {
			return nil, errBadRequest("volume %q not found", m.Name)
		} else if err != nil {
			return nil, fmt.Errorf("get volume: %w", err)
		}
	}
	return out, nil
}

// refuseVolumeContent answers E2B's volume content API (/volumecontent/...).
func refuseVolumeContent(w http.ResponseWriter, r *http.Request) error {
	return &apiError{http.StatusNotImplemented, "the volume content API (" + r.Method + " " + r.URL.Path +
		") is not served by the local E2B server; read and write a volume's files from a sandbox that mounts it"}
}
