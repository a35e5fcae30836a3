package e2b

// E2B's volumes: the control plane's /volumes routes (create, list, get, destroy) and
// volumeMounts at create; the Engine maps engine.Volumes onto them.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// CreateVolume creates a volume named name; a name in use answers 409 (IsConflict).
func (c *Client) CreateVolume(ctx context.Context, name string) (e2bwire.VolumeAndToken, error) {
	var v e2bwire.VolumeAndToken
	_, err := c.do(ctx, http.MethodPost, "/volumes", nil, e2bwire.NewVolume{Name: name}, &v)
	if err == nil && v.VolumeID == "" {
		err = errors.New("create volume: answer has no volumeID")
	}
	return v, err
}

// ListVolumes lists the team's volumes.
func (c *Client) ListVolumes(ctx context.Context) ([]e2bwire.Volume, error) {
	var vs []e2bwire.Volume
	_, err := c.do(ctx, http.MethodGet, "/volumes", nil, nil, &vs)
	return vs, err
}

// GetVolume describes a volume by id; an unknown one is a 404 (IsNotFound).
func (c *Client) GetVolume(ctx context.Context, id string) (e2bwire.VolumeAndToken, error) {
	var v e2bwire.VolumeAndToken
	_, err := c.do(ctx, http.MethodGet, "/volumes/"+url.PathEscape(id), nil, nil, &v)
	return v, err
}

// DeleteVolume destroys a volume and its data by id; an unknown one is a 404.
func (c *Client) DeleteVolume(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/volumes/"+url.PathEscape(id), nil, nil, nil)
	return err
}

var _ engine.Volumes = (*Engine)(nil)

// CreateVolume creates an E2B volume. E2B volumes have neither a capacity of their own
// nor labels: a requested capacity and the labels are not kept, and the VolumeInfo
// answered says so (CapacityBytes 0: E2B's, no Labels). An existing name is returned
// as it is with ifMissing, and is engine.ErrNameTaken otherwise.
func (e *Engine) CreateVolume(ctx context.Context, spec engine.VolumeSpec, ifMissing bool) (engine.VolumeInfo, error) {
	if spec.Name == "" {
		return engine.VolumeInfo{}, errors.New("create volume: a name is required")
	}
	if _, err := e.c.CreateVolume(ctx, spec.Name); IsConflict(err) {
		if !ifMissing {
			return engine.VolumeInfo{}, fmt.Errorf("create volume %q: %w: %v", spec.Name, engine.ErrNameTaken, err)
		}
	} else if err != nil {
		return engine.VolumeInfo{}, fmt.Errorf("create volume %q: %w", spec.Name, engineErr(err))
	}
	return e.GetVolume(ctx, spec.Name)
}

// volumeID is the id of the volume named name (E2B's ids are not its names).
func (e *Engine) volumeID(ctx context.Context, name string) (string, error) {
	vs, err := e.c.ListVolumes(ctx)
	if err != nil {
		return "", engineErr(err)
	}
	for _, v := range vs {
		if v.Name == name {
			return v.VolumeID, nil
		}
	}
	return "", fmt.Errorf("volume %q: %w", name, engine.ErrNotFound)
}

// users maps volume names to the live (running or paused) sandboxes that mount them.
func (e *Engine) users(ctx context.Context) (map[string][]string, error) {
	all, err := e.c.List(ctx, ListOptions{States: []string{e2bwire.StateRunning, e2bwire.StatePaused}})
	if err != nil {
		return nil, engineErr(err)
	}
	m := map[string][]string{}
	for _, d := range all {
		for _, vm := range d.VolumeMounts {
			if !slices.Contains(m[vm.Name], d.SandboxID) {
				m[vm.Name] = append(m[vm.Name], d.SandboxID)
			}
		}
	}
	for _, ids := range m {
		slices.Sort(ids)
	}
	return m, nil
}

// GetVolume describes the volume named name, with the sandboxes that mount it. E2B
// keeps no creation or last-mount time: both are zero.
func (e *Engine) GetVolume(ctx context.Context, name string) (engine.VolumeInfo, error) {
	if _, err := e.volumeID(ctx, name); err != nil {
		return engine.VolumeInfo{}, err
	}
	users, err := e.users(ctx)
	if err != nil {
		return engine.VolumeInfo{}, err
	}
	return engine.VolumeInfo{Name: name, UsedBy: users[name]}, nil
}

// ListVolumes lists the volumes with the sandboxes that mount them.
func (e *Engine) ListVolumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	vs, err := e.c.ListVolumes(ctx)
	if err != nil {
		return nil, engineErr(err)
	}
	users, err := e.users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]engine.VolumeInfo, 0, len(vs))
	for _, v := range vs {
		out = append(out, engine.VolumeInfo{Name: v.Name, UsedBy: users[v.Name]})
	}
	slices.SortFunc(out, func(a, b engine.VolumeInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveVolume destroys the volume named name and its data. One a live sandbox
// mounts is refused with engine.ErrInUse, naming the sandboxes, before E2B is asked
// (and when E2B answers 409).
func (e *Engine) RemoveVolume(ctx context.Context, name string) error {
	id, err := e.volumeID(ctx, name)
	if err != nil {
		return err
	}
	users, err := e.users(ctx)
	if err != nil {
		return err
	}
	if u := users[name]; len(u) > 0 {
		return fmt.Errorf("remove volume %q: mounted by sandbox %v: %w", name, u, engine.ErrInUse)
	}
	if err := e.c.DeleteVolume(ctx, id); IsConflict(err) {
		return fmt.Errorf("remove volume %q: %w: %v", name, engine.ErrInUse, err)
	} else if err != nil {
		return fmt.Errorf("remove volume %q: %w", name, engineErr(err))
	}
	return nil
}
