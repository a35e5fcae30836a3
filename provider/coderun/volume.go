package coderun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Session volumes: the engine's named volumes when it has them (Capabilities.Volumes),
// else a host directory in DataDir/volumes bound at /workspace (an engine on this
// machine, like the local one). A host directory has no capacity limit.

// volumes returns the engine's Volumes, or nil for the host-directory fallback.
func (r *Runner) volumes() engine.Volumes {
	if v, ok := r.eng.(engine.Volumes); ok && r.eng.Capabilities().Volumes {
		return v
	}
	return nil
}

func (r *Runner) hostVolume(name string) string { return filepath.Join(r.o.DataDir, "volumes", name) }

// ensureVolume creates the volume if it does not exist.
func (r *Runner) ensureVolume(ctx context.Context, name, session string) error {
	if v := r.volumes(); v != nil {
		_, err := v.CreateVolume(ctx, engine.VolumeSpec{Name: name, CapacityBytes: int64(r.cfg.VolumeCapacityMB) << 20,
			Labels: map[string]string{"coderun-session": session}}, true)
		if err != nil {
			return fmt.Errorf("create volume %s: %w", name, err)
		}
		return nil
	}
	if err := os.MkdirAll(r.hostVolume(name), 0o755); err != nil {
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	return nil
}

// volumeAlive reports whether the volume exists.
func (r *Runner) volumeAlive(ctx context.Context, name string) (bool, error) {
	if v := r.volumes(); v != nil {
		_, err := v.GetVolume(ctx, name)
		if errors.Is(err, engine.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	_, err := os.Stat(r.hostVolume(name))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// removeVolume deletes the volume and its data; a missing one is success.
func (r *Runner) removeVolume(ctx context.Context, name string) error {
	if v := r.volumes(); v != nil {
		if err := v.RemoveVolume(ctx, name); err != nil && !errors.Is(err, engine.ErrNotFound) {
			return fmt.Errorf("remove volume %s: %w", name, err)
		}
		return nil
	}
	if err := os.RemoveAll(r.hostVolume(name)); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	return nil
}

// memoryHeadroomMB is what the sandbox gets above the code's heap: Deno's own memory
// and buffers outside the V8 heap, so the heap limit trips before the engine's.
const memoryHeadroomMB = 384

// sandboxSpec is the spec of a session sandbox: the snapshot, the volume at
// /workspace, egress only to the allowed hosts, and the memory limit.
func (r *Runner) sandboxSpec(ctx context.Context, snapshot, vol, session string) (engine.Spec, error) {
	if err := r.ensureVolume(ctx, vol, session); err != nil {
		return engine.Spec{}, err
	}
	spec := engine.Spec{Snapshot: snapshot, Labels: map[string]string{"coderun-session": session}}
	if r.volumes() != nil {
		spec.Volumes = []engine.VolumeMount{{Name: vol, Target: rules.CoderunWorkspace}}
	} else {
		spec.Mounts = []engine.Mount{{Source: r.hostVolume(vol), Target: rules.CoderunWorkspace}}
	}
	if hosts := r.cfg.AllowedHosts(); len(hosts) > 0 {
		spec.Egress, spec.EgressHosts = true, hosts
	}
	if r.eng.Capabilities().Limits {
		spec.Limits.MemoryBytes = int64(r.cfg.MemoryMB+memoryHeadroomMB) << 20
	}
	return spec, nil
}
