package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
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

// Snapshot copies the sandbox's writable directories to a new snapshot. When the
// freezer is usable the sandbox is frozen for the copy, so the copy is consistent.
func (e *Engine) Snapshot(ctx context.Context, id string) (string, error) {
	bx, st, err := e.running(id)
	if err != nil {
		return "", err
	}
	if st.Image != nil {
		return "", fmt.Errorf("snapshot %s: a sandbox from an image keeps its changes in its upper layer (UpperDir): %w", id, engine.ErrUnsupported)
	}
	if e.caps.Pause && !st.Paused {
		if err := e.cg.setFrozen(st.Cgroups, true); err == nil {
			defer func() {
				bx.mu.Lock()
				paused := bx.st.Paused
				bx.mu.Unlock()
				if !paused {
					_ = e.cg.setFrozen(st.Cgroups, false)
				}
			}()
		}
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
	if err := writeFileAtomic(filepath.Join(dst, "snapshot.json"), b, 0o600); err != nil {
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
	if err := e.cg.setFrozen(bx.st.Cgroups, paused); err != nil {
		return fmt.Errorf("pause %s: %w", id, err)
	}
	bx.st.Paused = paused
	return e.saveState(bx.st)
}
