package modalserver

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestVolumesRefused: on an engine without volumes (the local engine today) every
// volume call, and a create that mounts one, is the local server's clear refusal.
func TestVolumesRefused(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	url, _ := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx := t.Context()
	for name, call := range map[string]func() error{
		"FromName": func() error {
			_, err := c.Volumes.FromName(ctx, "data", &modal.VolumeFromNameParams{CreateIfMissing: true})
			return err
		},
		"Ephemeral": func() error { _, err := c.Volumes.Ephemeral(ctx, nil); return err },
		"Delete":    func() error { return c.Volumes.Delete(ctx, "data", nil) },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "local Modal server: Volumes are not available") {
			t.Errorf("Volumes.%s = %v, want the local server's refusal", name, err)
		}
	}
}

// TestVolumes: on an engine with volumes, Modal volumes are its volumes: made by name
// or ephemeral, mounted read-write in one sandbox and seen from another, refused
// deletion while mounted, listed, deleted. The engine is the local engine with
// volumes as host directories bind-mounted through Spec.Mounts (dirVolumes), standing
// in until the local engine has its own.
func TestVolumes(t *testing.T) {
	eng := &dirVolumes{Engine: modaltest.Engine(t, local.EngineOptions{}), dir: t.TempDir(), vols: map[string]*engine.VolumeInfo{}}
	url, srv := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "vol", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Volumes.FromName(ctx, "data", nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("FromName of a missing volume = %v, want not found", err)
	}
	vol, err := c.Volumes.FromName(ctx, "data", &modal.VolumeFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("debian:bookworm-slim", nil)
	sb1, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Volumes: map[string]*modal.Volume{"/mnt/data": vol}})
	if err != nil {
		t.Fatalf("Create with a volume: %v", err)
	}
	if _, _, code := execOut(t, ctx, sb1, []string{"sh", "-c", "echo shared > /mnt/data/f"}, nil); code != 0 {
		t.Fatalf("write to the volume = %d", code)
	}
	readOnly := true
	sb2, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Volumes: map[string]*modal.Volume{"/v": vol.WithMountOptions(&modal.VolumeMountOptionsParams{ReadOnly: &readOnly})}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := execOut(t, ctx, sb2, []string{"cat", "/v/f"}, nil); out != "shared\n" {
		t.Errorf("the second sandbox reads %q from the volume", out)
	}
	if _, _, code := execOut(t, ctx, sb2, []string{"sh", "-c", "echo x > /v/g"}, nil); code == 0 {
		t.Errorf("a read-only mount was written")
	}
	if err := c.Volumes.Delete(ctx, "data", nil); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Delete of a mounted volume = %v, want in use", err)
	}
	resp, err := srv.VolumeList(ctx, nil)
	if err != nil || len(resp.GetItems()) != 1 || resp.GetItems()[0].GetLabel() != "data" {
		t.Errorf("VolumeList = %v, %v; want the one named volume", resp, err)
	}
	eph, err := c.Volumes.Ephemeral(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eph.CloseEphemeral()
	sb1.Terminate(ctx, nil)
	sb2.Terminate(ctx, nil)
	if err := c.Volumes.Delete(ctx, "data", nil); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := c.Volumes.FromName(ctx, "data", nil); err == nil {
		t.Errorf("the deleted volume is still found")
	}
}

// dirVolumes is the local engine with engine.Volumes as host directories, mounted
// with Spec.Mounts.
type dirVolumes struct {
	*local.Engine
	dir  string
	mu   sync.Mutex
	vols map[string]*engine.VolumeInfo
	used map[string][]string // volume -> sandbox ids
}

func (d *dirVolumes) Capabilities() engine.Capabilities {
	c := d.Engine.Capabilities()
	c.Volumes = true
	return c
}

func (d *dirVolumes) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	d.mu.Lock()
	for _, v := range spec.Volumes {
		if d.vols[v.Name] == nil {
			d.mu.Unlock()
			return engine.Info{}, fmt.Errorf("volume %s: %w", v.Name, engine.ErrNotFound)
		}
		spec.Mounts = append(spec.Mounts, engine.Mount{Source: filepath.Join(d.dir, v.Name), Target: v.Target, ReadOnly: v.ReadOnly})
	}
	d.mu.Unlock()
	info, err := d.Engine.Create(ctx, spec)
	if err != nil {
		return info, err
	}
	d.mu.Lock()
	if d.used == nil {
		d.used = map[string][]string{}
	}
	for _, v := range spec.Volumes {
		d.used[v.Name] = append(d.used[v.Name], info.ID)
	}
	d.mu.Unlock()
	return info, nil
}

func (d *dirVolumes) usedBy(ctx context.Context, name string) []string {
	var live []string
	for _, id := range d.used[name] {
		if info, err := d.Engine.Get(ctx, id); err == nil && info.State != engine.StateDead {
			live = append(live, id)
		}
	}
	return live
}

func (d *dirVolumes) CreateVolume(ctx context.Context, spec engine.VolumeSpec, ifMissing bool) (engine.VolumeInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v := d.vols[spec.Name]; v != nil {
		if ifMissing {
			return *v, nil
		}
		return engine.VolumeInfo{}, fmt.Errorf("volume %s exists: %w", spec.Name, engine.ErrNameTaken)
	}
	if err := os.Mkdir(filepath.Join(d.dir, spec.Name), 0o777); err != nil {
		return engine.VolumeInfo{}, err
	}
	v := &engine.VolumeInfo{Name: spec.Name, Created: time.Now(), Labels: maps.Clone(spec.Labels)}
	d.vols[spec.Name] = v
	return *v, nil
}

func (d *dirVolumes) GetVolume(ctx context.Context, name string) (engine.VolumeInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v := d.vols[name]
	if v == nil {
		return engine.VolumeInfo{}, fmt.Errorf("volume %s: %w", name, engine.ErrNotFound)
	}
	out := *v
	out.UsedBy = d.usedBy(ctx, name)
	return out, nil
}

func (d *dirVolumes) ListVolumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []engine.VolumeInfo
	for _, k := range slices.Sorted(maps.Keys(d.vols)) {
		out = append(out, *d.vols[k])
	}
	return out, nil
}

func (d *dirVolumes) RemoveVolume(ctx context.Context, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.vols[name] == nil {
		return fmt.Errorf("volume %s: %w", name, engine.ErrNotFound)
	}
	if ids := d.usedBy(ctx, name); len(ids) > 0 {
		return fmt.Errorf("volume %s is mounted by %s: %w", name, strings.Join(ids, ", "), engine.ErrInUse)
	}
	delete(d.vols, name)
	return os.RemoveAll(filepath.Join(d.dir, name))
}
