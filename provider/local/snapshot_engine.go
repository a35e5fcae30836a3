package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/rootfs"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// snapshotDirs are the writable directories a snapshot keeps; /run is runtime state
// and starts empty, as after a reboot.
var snapshotDirs = []string{dirHome, dirTmp, dirVarTmp}

// engineSnapshot is dir/snapshots/<id>/snapshot.json.
type engineSnapshot struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Created time.Time `json:"created"`
}

// Snapshot keeps the sandbox's writable state, frozen for the time it takes when the
// freezer is usable, so it is consistent. A sandbox booted from an image gets an image:
// its upper layer committed on top of its image (volumes and /run are not in it), which
// Spec.Image or Spec.Snapshot boots. Any other sandbox gets a copy of its writable
// directories under the data dir's snapshots/.

func (e *Engine) Snapshot(ctx context.Context, id string) (string, error) {
	bx, st, err := e.running(id)
	if err != nil {
		return "", err
	}
	if e.caps.Pause && !st.Paused {
		if err := e.cg.SetFrozen(st.Cgroups, true); err == nil {
			defer func() {
				bx.mu.Lock()
				paused := bx.st.Paused
				bx.mu.Unlock()
				if !paused {
					_ = e.cg.SetFrozen(st.Cgroups, false)
				}
			}()
		}
	}
	if st.Image != nil {
		return e.commitImage(ctx, st)
	}
	sid := newEngineID("snap-")
	dst := filepath.Join(e.dir, "snapshots", sid)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return "", err
	}
	for _, d := range snapshotDirs {
		if err := copyDir(ctx, filepath.Join(e.sandboxDir(id), d), filepath.Join(dst, filepath.Base(d))); err != nil {
			os.RemoveAll(dst)
			return "", fmt.Errorf("snapshot %s: %w", id, err)
		}
	}
	b, _ := json.MarshalIndent(engineSnapshot{ID: sid, Sandbox: id, Created: time.Now().UTC()}, "", "  ")
	if err := atomicfile.WriteFile(filepath.Join(dst, "snapshot.json"), b, 0o600); err != nil {
		os.RemoveAll(dst)
		return "", err
	}
	return sid, nil
}

// copyDir copies src to dst (which must not exist) with cp -a: links, modes, owners
// and times kept, reflinks where the filesystem has them.
func copyDir(ctx context.Context, src, dst string) error {
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", src, dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copy %s: %w: %s", src, err, provider.CapOutput(string(out), 1024))
	}
	return nil
}

// restoreSnapshot replaces the writable directories of the sandbox directory sd with
// the snapshot's.
func (e *Engine) restoreSnapshot(ctx context.Context, sid, sd string) error {
	src := filepath.Join(e.dir, "snapshots", sid)
	if !validEngineID(sid) {
		return fmt.Errorf("snapshot %q: %w", sid, engine.ErrNotFound)
	}
	if _, err := os.Stat(filepath.Join(src, "snapshot.json")); err != nil {
		return fmt.Errorf("snapshot %q: %w", sid, engine.ErrNotFound)
	}
	for _, d := range snapshotDirs {
		if err := os.RemoveAll(filepath.Join(sd, d)); err != nil {
			return err
		}
		if err := copyDir(ctx, filepath.Join(src, filepath.Base(d)), filepath.Join(sd, d)); err != nil {
			return fmt.Errorf("restore snapshot %s: %w", sid, err)
		}
	}
	return nil
}

// Pause freezes every process of the sandbox (cgroup freezer).
func (e *Engine) Pause(ctx context.Context, id string) error { return e.setPaused(id, true) }

// Resume thaws a paused sandbox.
func (e *Engine) Resume(ctx context.Context, id string) error { return e.setPaused(id, false) }

func (e *Engine) setPaused(id string, paused bool) error {
	if !e.caps.Pause {
		return fmt.Errorf("pause: no usable cgroup freezer: %w", engine.ErrUnsupported)
	}
	bx, _, err := e.running(id)
	if err != nil {
		return err
	}
	bx.mu.Lock()
	defer bx.mu.Unlock()
	if bx.gone {
		return fmt.Errorf("pause %s: being terminated: %w", id, engine.ErrNotFound)
	}
	if err := e.cg.SetFrozen(bx.st.Cgroups, paused); err != nil {
		return fmt.Errorf("pause %s: %w", id, err)
	}
	bx.st.Paused = paused
	return e.saveState(bx.st)
}

// commitImage makes the upper layer of the image sandbox st a new image.
func (e *Engine) commitImage(ctx context.Context, st state.Record) (string, error) {
	ic, ok := e.o.Images.(engine.ImageCommitter)
	if !ok {
		return "", fmt.Errorf("snapshot %s: the engine's image store cannot commit images: %w", st.ID, engine.ErrUnsupported)
	}
	id, err := ic.CommitImage(ctx, st.Image.ID, filepath.Join(e.sandboxDir(st.ID), rootfs.DirUpper), rules.HostIDBase, rules.IDCount)
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", st.ID, err)
	}
	return id, nil
}

// snapshotImage reads spec's Image and Snapshot: a snapshot that names an image (what
// Snapshot returns for an image sandbox) boots as that image; any other is a copy.
func (e *Engine) snapshotImage(spec engine.Spec) (image, snapshot string, err error) {
	if spec.Snapshot == "" || e.o.Images == nil || validEngineID(spec.Snapshot) && strings.HasPrefix(spec.Snapshot, "snap-") {
		return spec.Image, spec.Snapshot, nil
	}
	if spec.Image != "" {
		return "", "", fmt.Errorf("snapshot %q and image %q: give one", spec.Snapshot, spec.Image)
	}
	return spec.Snapshot, "", nil
}
