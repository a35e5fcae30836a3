package coderun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Session volumes are the engine's named volumes when it has them
// (Capabilities.Volumes): volume_capacity_mb is their capacity, the engine tracks their
// last mount and refuses to remove one a live sandbox mounts. An engine without
// volumes that runs on this machine (the local engine where loop devices or e2fsprogs
// are missing) gets a host directory, DataDir/volumes/<name>, bound at /workspace with
// Spec.Mounts: no capacity, and only the registry knows its last access.

// volumes returns the engine's Volumes, or nil for the host-directory fallback.
func (r *Runner) volumes() engine.Volumes {
	if v, ok := r.eng.(engine.Volumes); ok && r.eng.Capabilities().Volumes {
		return v
	}
	return nil
}

// checkVolumes refuses an engine that claims volumes without implementing them (a
// wrapper that hides the interface): its sessions would silently get host directories.
func checkVolumes(eng engine.Engine) error {
	if _, ok := eng.(engine.Volumes); eng.Capabilities().Volumes && !ok {
		return fmt.Errorf("engine %T has Capabilities().Volumes but does not implement engine.Volumes", eng)
	}
	return nil
}

func (r *Runner) hostVolume(name string) string { return filepath.Join(r.o.DataDir, "volumes", name) }

// ensureVolume creates the volume if it does not exist (an existing one keeps its
// capacity).
func (r *Runner) ensureVolume(ctx context.Context, name, session string) error {
	if v := r.volumes(); v != nil {
		_, err := v.CreateVolume(ctx, engine.VolumeSpec{Name: name, CapacityBytes: int64(r.cfg.VolumeCapacityMB) << 20,
			Labels: map[string]string{"coderun-session": session}}, true)
		if err != nil {
			return fmt.Errorf("create volume %s: %w", name, err)
		}
		return nil
	}
	// The engine binds a host directory as it is (not id-mapped), so the sandbox's user
	// is some unprivileged host uid: the directory is open to all, and reachable only
	// through DataDir (0700).
	dir := r.hostVolume(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return fmt.Errorf("create volume %s: %w", name, err)
	}
	return nil
}

// volumeState is what the engine knows of a volume.
type volumeState struct {
	exists bool
	// lastAccessed is the engine's last mount (zero for a host directory).
	lastAccessed time.Time
	// usedBy are the live sandboxes that mount it.
	usedBy []string
}

// volume describes a volume; a missing one is exists false.
func (r *Runner) volume(ctx context.Context, name string) (volumeState, error) {
	if v := r.volumes(); v != nil {
		info, err := v.GetVolume(ctx, name)
		if errors.Is(err, engine.ErrNotFound) {
			return volumeState{}, nil
		}
		if err != nil {
			return volumeState{}, fmt.Errorf("volume %s: %w", name, err)
		}
		return volumeState{exists: true, lastAccessed: info.LastAccessed, usedBy: info.UsedBy}, nil
	}
	_, err := os.Stat(r.hostVolume(name))
	if errors.Is(err, os.ErrNotExist) {
		return volumeState{}, nil
	}
	if err != nil {
		return volumeState{}, fmt.Errorf("volume %s: %w", name, err)
	}
	return volumeState{exists: true}, nil
}

// volumeAlive reports whether the volume exists.
func (r *Runner) volumeAlive(ctx context.Context, name string) (bool, error) {
	st, err := r.volume(ctx, name)
	return st.exists, err
}

// removeVolume deletes the volume and its data; a missing one is success, one a live
// sandbox mounts is engine.ErrInUse.
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

// sandboxSpec is the spec of a session sandbox: the snapshot (an image, or a copy),
// the volume at /workspace, egress only to the allowed hosts, the secrets that are
// set (placeholders inside, values added by the engine's egress proxy), and the
// memory limit.
func (r *Runner) sandboxSpec(ctx context.Context, snap SnapshotInfo, vol, session string) (engine.Spec, error) {
	if err := r.ensureVolume(ctx, vol, session); err != nil {
		return engine.Spec{}, err
	}
	spec := engine.Spec{Labels: map[string]string{"coderun-session": session}}
	spec.Snapshot, spec.Image = bootFrom(snap)
	if r.volumes() != nil {
		spec.Volumes = []engine.VolumeMount{{Name: vol, Target: rules.CoderunWorkspace}}
	} else {
		spec.Mounts = []engine.Mount{{Source: r.hostVolume(vol), Target: rules.CoderunWorkspace}}
	}
	if hosts := r.cfg.AllowedHosts(); len(hosts) > 0 {
		spec.Egress, spec.EgressHosts = true, hosts
	}
	spec.Secrets = r.cfg.secrets()
	if r.eng.Capabilities().Limits {
		spec.Limits.MemoryBytes = int64(r.cfg.MemoryMB+memoryHeadroomMB) << 20
	}
	return spec, nil
}

// secretsHint says what to do when an engine refuses a spec's secrets (Modal or E2B
// without an egress gateway): the secrets are never degraded to environment variables.
func secretsHint(spec engine.Spec, err error) error {
	if len(spec.Secrets) == 0 || !errors.Is(err, engine.ErrUnsupported) {
		return err
	}
	return fmt.Errorf("the packages' secrets (secret_env) reach code only as placeholders the engine's egress proxy swaps, and this engine refused them: configure an egress gateway for it, or remove secret_env: %w", err)
}

// bootFrom is how a sandbox boots from the dependency snapshot: Spec.Image for an
// image, Spec.Snapshot for a copy.
func bootFrom(snap SnapshotInfo) (snapshot, image string) {
	if snap.Image {
		return "", snap.ID
	}
	return snap.ID, ""
}
