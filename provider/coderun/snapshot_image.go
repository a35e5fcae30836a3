package coderun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/debian"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// The dependency snapshot as an image: on an engine that boots images
// (Capabilities.Images) and whose image store the runner has (Options.Images), the
// build sandbox boots from the base (chooseBase), Deno and node_modules go into its upper
// layer, and the engine's Snapshot of it commits that layer as an image on the base,
// which the store names deps-<configHash>. Sessions boot it with Spec.Image: the
// layers are shared, nothing is copied. The name in the store is the registry: a
// restart finds it there.

// ImageStore is the image store of an engine that boots images: the one it resolves
// Spec.Image with and commits the snapshots of image sandboxes to
// (provider/image/store.Store is one).
type ImageStore interface {
	engine.ImageResolver
	// Tag names the image ref; the name moves from any image that had it.
	Tag(ctx context.Context, ref, name string) error
}

// imageStore is the store the dependency snapshot is an image in, or nil (a copy
// snapshot).
func (r *Runner) imageStore() ImageStore { return r.images }

// chooseBase decides, once per Runner, whether the dependency snapshot is an image:
// with an image store on an engine that boots images, and Config.Image set or the
// default base (image.DefaultFrom) in the store or buildable there (the store is a
// provider/image/store.Store and mmdebstrap is installed: baseImage builds it with the
// snapshot, and says so on Progress). It returns the base's reference, or "" for a
// copy snapshot, which it explains on Progress: the copy is the slow path (a first
// run_code of ~570 ms against ~120 ms, and the packages copied into every session).
func chooseBase(ctx context.Context, o Options) (string, error) {
	if o.Images == nil || !o.Engine.Capabilities().Images {
		return "", nil
	}
	if o.Config.Image != "" {
		return o.Config.Image, nil
	}
	_, err := o.Images.ResolveImage(ctx, image.DefaultFrom)
	if err == nil {
		return image.DefaultFrom, nil
	}
	if !errors.Is(err, engine.ErrNotFound) {
		return "", fmt.Errorf("base image %s: %w", image.DefaultFrom, err)
	}
	_, buildable := o.Images.(*store.Store)
	if _, lerr := exec.LookPath("mmdebstrap"); buildable && lerr == nil {
		return image.DefaultFrom, nil
	}
	fmt.Fprintf(o.Progress, "the dependency snapshot is a copy, the slower path: the base image %s is not in the image store "+
		"and cannot be built here (apt-get install mmdebstrap, or set image in [sandbox])\n", image.DefaultFrom)
	o.Logger.Info("the dependency snapshot is a copy: the default base image is not in the image store", "image", image.DefaultFrom)
	return "", nil
}

// lookupImage finds the image name in the store.
func (r *Runner) lookupImage(ctx context.Context, name string) (SnapshotInfo, bool, error) {
	fs, err := r.o.Images.ResolveImage(ctx, name)
	if errors.Is(err, engine.ErrNotFound) {
		return SnapshotInfo{Name: name, Image: true, Base: r.base}, false, nil
	}
	if err != nil {
		return SnapshotInfo{}, false, fmt.Errorf("dependency image %s: %w", name, err)
	}
	return SnapshotInfo{Name: name, ID: fs.ID, Image: true, Base: r.base, Reused: true}, true, nil
}

// buildImage builds the dependency snapshot as an image on the base and names it.
func (r *Runner) buildImage(ctx context.Context, name string) (SnapshotInfo, error) {
	base, err := r.baseImage(ctx)
	if err != nil {
		return SnapshotInfo{}, err
	}
	spec := engine.Spec{Image: base, Egress: true, EgressHosts: []string{registryHost}, Timeout: 30 * time.Minute,
		Labels: map[string]string{"coderun": "build"}}
	// A slim base has no CA certificates: Deno's own (mozilla) and, for a
	// TLS-inspecting proxy on the way to the registry, the host's, in /run (never
	// part of the image).
	env := []string{"DENO_TLS_CA_STORE=mozilla"}
	var extra []sandboxFile
	if pem := hostCAs(); pem != nil {
		extra = append(extra, sandboxFile{rules.CoderunBuildCA, pem, 0o644})
		env = append(env, "DENO_CERT="+rules.CoderunBuildCA)
	}
	id, err := r.buildSnapshot(ctx, name, spec, env, extra)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if err := r.o.Images.Tag(ctx, id, name); err != nil {
		return SnapshotInfo{}, fmt.Errorf("name the dependency image: %w", err)
	}
	return SnapshotInfo{Name: name, ID: id, Image: true, Base: r.base}, nil
}

// baseImage resolves the base; a Debian base (debian:<suite>[-slim]) the store lacks
// is built with mmdebstrap when the store is a provider/image/store.Store, as the
// image builder does.
func (r *Runner) baseImage(ctx context.Context) (string, error) {
	ref := r.base
	fs, err := r.o.Images.ResolveImage(ctx, ref)
	if err == nil {
		return fs.ID, nil
	}
	st, ok := r.o.Images.(*store.Store)
	if _, _, deb := debian.ParseRef(ref); !errors.Is(err, engine.ErrNotFound) || !ok || !deb {
		return "", fmt.Errorf("base image %s: %w", ref, err)
	}
	fmt.Fprintf(r.o.Progress, "the base image %s is not in the image store: building it with mmdebstrap (once, about 20 s)\n", ref)
	id, err := debian.Build(ctx, st, ref, debian.Options{Log: r.o.Progress})
	if err != nil {
		return "", fmt.Errorf("base image %s: %w", ref, err)
	}
	return id, nil
}

// hostCAFiles are where Linux distributions keep the system's CA bundle (the list Go's
// crypto/x509 reads).
var hostCAFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// hostCAs is the host's CA bundle in PEM ($SSL_CERT_FILE first), or nil.
func hostCAs() []byte {
	files := hostCAFiles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = append([]string{f}, files...)
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 && len(b) < 16<<20 {
			return b
		}
	}
	return nil
}
