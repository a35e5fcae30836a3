package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/oci"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// prepare checks the spec's runtime and limits and makes the sandbox directory sd:
// its disk, its writable directories (owned by the sandbox's ids), its image's upper
// layer, a snapshot's state and the production layout.
func (e *Engine) prepare(ctx context.Context, bx *box, sd string) (*engine.RootFS, error) {
	spec := bx.st.Spec
	rt, err := oci.Check(spec.Runtime, e.caps.Runtimes)
	if err != nil {
		return nil, err
	}
	lim, err := e.limitsFor(spec.Limits)
	if err != nil {
		return nil, err
	}
	bx.st.Want = lim
	if err := os.MkdirAll(sd, 0o700); err != nil {
		return nil, err
	}
	// The cgroups are made while the disk is.
	cgDone := make(chan struct{})
	go func() {
		defer close(cgDone)
		applied, groups := e.cg.Make(bx.st.ID, lim)
		applied.DiskBytes = lim.DiskBytes
		bx.mu.Lock()
		bx.st.Applied, bx.st.Cgroups = applied, groups
		bx.mu.Unlock()
	}()
	var diskErr error
	if lim.DiskBytes > 0 {
		diskErr = e.disks.Make(sd, lim.DiskBytes)
	}
	<-cgDone
	if diskErr != nil {
		return nil, diskErr
	}
	bx.mu.Lock()
	applied := bx.st.Applied
	bx.mu.Unlock()
	if err := checkApplied(spec.Limits, applied); err != nil {
		return nil, err
	}
	for _, d := range []string{dirHome, dirTmp, dirVarTmp, dirRun} {
		mode := os.FileMode(0o755)
		if d == dirTmp || d == dirVarTmp {
			mode = 0o777 | os.ModeSticky
		}
		if err := os.MkdirAll(filepath.Join(sd, d), mode); err != nil {
			return nil, err
		}
		_ = os.Chmod(filepath.Join(sd, d), mode)
		if !e.o.Unisolated {
			// Owned by the sandbox's root, the home by its user.
			id := hostID(0)
			if d == dirHome {
				id = hostID(rules.UserID)
			}
			if err := os.Chown(filepath.Join(sd, d), id, id); err != nil {
				return nil, err
			}
		}
	}
	imageRef, snapshot, err := e.snapshotImage(spec)
	if err != nil {
		return nil, err
	}
	img, err := e.resolveImage(ctx, imageRef, sd)
	if err != nil {
		return nil, err
	}
	bx.st.Runtime, bx.st.Image = rt, img
	if snapshot != "" {
		if img != nil {
			return nil, fmt.Errorf("a copied snapshot over an image: %w", engine.ErrUnsupported)
		}
		if err := e.restoreSnapshot(ctx, snapshot, sd); err != nil {
			return nil, err
		}
	}
	if !e.o.Unisolated && img == nil {
		// The production layout: the workspace, the home's .proliferate and the
		// sidecar's state dir exist from the start.
		// The boot plan runs as root: these are root's (git refuses a repo of
		// another owner), the home around them the user's.
		for _, d := range []string{rules.WorkspaceDir, rules.HomeDir + "/.proliferate", rules.StateDir} {
			p := e.hostDir(sd, d)
			if err := os.MkdirAll(p, 0o755); err != nil {
				return nil, err
			}
			if err := os.Chown(p, hostID(0), hostID(0)); err != nil {
				return nil, err
			}
		}
	}
	return img, nil
}
