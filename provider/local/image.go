package local

// Sandboxes from images: the engine resolves Spec.Image through EngineOptions.Images
// and init mounts the layers under the sandbox's upper layer (package rootfs).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/rootfs"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// resolveImage finds the spec's image and makes the sandbox directory sd's upper
// layer and work directory, owned by the sandbox's root.
func (e *Engine) resolveImage(ctx context.Context, ref, sd string) (*engine.RootFS, error) {
	if ref == "" {
		return nil, nil
	}
	if e.o.Images == nil || e.o.Unisolated {
		return nil, fmt.Errorf("image %q: this engine has no image store: %w", ref, engine.ErrUnsupported)
	}
	fs, err := e.o.Images.ResolveImage(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", ref, err)
	}
	if len(fs.Layers) == 0 {
		return nil, fmt.Errorf("image %q has no layers", ref)
	}
	for _, l := range fs.Layers {
		if !filepath.IsAbs(l) {
			return nil, fmt.Errorf("image %q: layer %q is not an absolute path", ref, l)
		}
	}
	for _, d := range []string{rootfs.DirUpper, rootfs.DirWork} {
		p := filepath.Join(sd, d)
		if err := os.Mkdir(p, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chown(p, hostID(0), hostID(0)); err != nil {
			return nil, err
		}
	}
	return &fs, nil
}

// UpperDir is the host path of the sandbox's writable upper layer: what it changed in
// its image's root, as the kernel's overlay writes it (deleted entries are whiteouts:
// character devices 0/0; opaque directories carry trusted.overlay.opaque). /run, /dev,
// /proc and /sys are not in it. Its files are owned by host ids: an id inside plus
// rules.HostIDBase. A sandbox without an image has no upper layer (ErrUnsupported).
func (e *Engine) UpperDir(id string) (string, error) {
	bx, err := e.lookup(id)
	if err != nil {
		return "", err
	}
	bx.mu.Lock()
	img := bx.st.Image
	bx.mu.Unlock()
	if img == nil {
		return "", fmt.Errorf("sandbox %s has no image, so no upper layer: %w", id, engine.ErrUnsupported)
	}
	return filepath.Join(e.sandboxDir(id), rootfs.DirUpper), nil
}

// homeOf is Info.Home: the host path of the sandbox's /home/user. An image sandbox's
// home is in its overlay, reached through its init's root.
func (e *Engine) homeOf(st state.Record) string {
	if st.Image != nil {
		return "/proc/" + strconv.Itoa(st.Pid) + "/root" + rules.HomeDir
	}
	return filepath.Join(e.sandboxDir(st.ID), dirHome)
}
