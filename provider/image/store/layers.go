package store

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// hashWriter hashes what passes through it.
type hashWriter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newHashWriter() *hashWriter { return &hashWriter{h: sha256.New()} }

func (w *hashWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return w.h.Write(p)
}

func (w *hashWriter) digest() digest.Digest {
	return digest.NewDigestFromBytes(digest.SHA256, w.h.Sum(nil))
}

// unpackBlob unpacks the layer blob of d (already in the blob store) into layers/, once,
// and records its descriptor. It returns the layer's diff id.
func (s *Store) unpackBlob(d ocispec.Descriptor) (digest.Digest, error) {
	f, err := os.Open(s.blobPath(d.Digest))
	if err != nil {
		return "", err
	}
	defer f.Close()
	var r io.Reader = f
	switch d.MediaType {
	case ocispec.MediaTypeImageLayer, dockerLayer:
	case ocispec.MediaTypeImageLayerGzip, dockerLayerGzip:
		zr, err := gzip.NewReader(f)
		if err != nil {
			return "", fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		defer zr.Close()
		r = zr
	case ocispec.MediaTypeImageLayerZstd:
		return "", fmt.Errorf("layer %s: zstd layers are not supported; export the image with gzip layers", d.Digest)
	default:
		return "", fmt.Errorf("layer %s: media type %q is not a layer this store reads", d.Digest, d.MediaType)
	}
	return s.addLayer(r, func(digest.Digest) ocispec.Descriptor { return d })
}

// addLayer unpacks the uncompressed layer tar r into a staging folder, and moves it to
// layers/<diffid> unless that layer is already there. desc gives the blob descriptor
// to record from the diff id.
func (s *Store) addLayer(r io.Reader, desc func(diffID digest.Digest) ocispec.Descriptor) (digest.Digest, error) {
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), "layer-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp's 0700; a layer's root is 0755
		return "", err
	}
	hw := newHashWriter()
	tee := io.TeeReader(r, hw)
	if err := unpackLayer(tee, tmp); err != nil {
		return "", err
	}
	if _, err := io.Copy(io.Discard, tee); err != nil { // the tar's padding
		return "", err
	}
	diffID := hw.digest()
	return diffID, s.installLayer(tmp, diffID, desc(diffID))
}

// installLayer moves the unpacked folder dir to layers/<diffid> and writes its
// descriptor; a layer already present is kept (same diff id, same content).
func (s *Store) installLayer(dir string, diffID digest.Digest, d ocispec.Descriptor) error {
	dst := s.layerDir(diffID)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	data, err := json.Marshal(d)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(dst+".json", data, 0o644); err != nil {
		return err
	}
	if err := os.Rename(dir, dst); err != nil {
		return fmt.Errorf("install layer %s: %w", diffID, err)
	}
	return nil
}

// layerDescriptor is the blob descriptor of an unpacked layer.
func (s *Store) layerDescriptor(diffID digest.Digest) (ocispec.Descriptor, error) {
	data, err := os.ReadFile(s.layerDir(diffID) + ".json")
	if errors.Is(err, os.ErrNotExist) {
		// Unpacked by an older version only: its descriptor is as good.
		data, err = os.ReadFile(filepath.Join(s.dir, oldLayersDir, strings.TrimPrefix(string(diffID), "sha256:")+".json"))
	}
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("layer %s: %w", diffID, err)
	}
	var d ocispec.Descriptor
	return d, json.Unmarshal(data, &d)
}

// CommitOptions say how CommitLayer reads its folder.
type CommitOptions struct {
	// Move hands the folder over: it is removed once stored (files the caller wrote
	// for the layer). Otherwise the folder is only read and stays the caller's (a build
	// sandbox's upper layer). Either way the store unpacks its own copy.
	Move bool
	// IDs maps the folder's host ids to the layer's; nil keeps them. Not with Move.
	IDs IDMap
	// Skip leaves an entry out of the layer (what a build sandbox's engine made at boot);
	// entries under a skipped folder are still read. Not with Move.
	Skip SkipFunc
}

// CommitLayer makes the overlayfs-form folder dir a layer and returns its diff id: its
// tar becomes a blob and its unpacked copy a layer folder (see CommitOptions).
func (s *Store) CommitLayer(ctx context.Context, dir string, o CommitOptions) (string, error) {
	if o.Move && (o.IDs != nil || o.Skip != nil) {
		return "", errors.New("commit layer: a moved folder is taken as it is (no ids, no skips)")
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	hw := newHashWriter()
	if err := packLayer(dir, io.MultiWriter(f, hw), o.IDs, o.Skip); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	diffID := hw.digest()
	if err := os.Rename(f.Name(), s.blobPath(diffID)); err != nil {
		return "", err
	}
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	// Every layer folder is unpacked from its blob, so its files are owned by the
	// sandboxes' host ids (LayerID) whoever wrote dir.
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: diffID, Size: hw.n}
	if _, err := s.unpackBlob(d); err != nil {
		return "", err
	}
	if o.Move {
		return diffID.String(), os.RemoveAll(dir)
	}
	return diffID.String(), nil
}

// ImageSpec is a new image: a parent's layers plus more, and a configuration.
type ImageSpec struct {
	// Parent is the image (id or name) whose layers come first; empty: none.
	Parent string
	// Layers are diff ids (from CommitLayer or an import) put on top of Parent's.
	Layers []string
	// Config is the image's whole configuration.
	Config Config
	// CreatedBy is recorded in the image's history (e.g. the step's Dockerfile line).
	CreatedBy string
	// Name, when set, names the image.
	Name string
}

// NewImage stores an image and returns its id. The same parent, layers and
// configuration give the same id.
func (s *Store) NewImage(ctx context.Context, spec ImageSpec) (string, error) {
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	return s.newImage(ctx, spec)
}

func (s *Store) newImage(ctx context.Context, spec ImageSpec) (string, error) {
	cfg := ocispec.Image{Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"}, Config: spec.Config, RootFS: ocispec.RootFS{Type: "layers"}}
	parent := ""
	if spec.Parent != "" {
		p, err := s.Get(ctx, spec.Parent)
		if err != nil {
			return "", err
		}
		parent = p.ID
		var pc ocispec.Image
		if err := s.readJSON(ocispec.Descriptor{Digest: digest.Digest("sha256:" + p.ID)}, &pc); err != nil {
			return "", err
		}
		cfg.RootFS.DiffIDs, cfg.History = pc.RootFS.DiffIDs, pc.History
	}
	cfg.RootFS.DiffIDs = slices.Clone(cfg.RootFS.DiffIDs)
	for _, l := range spec.Layers {
		if err := checkDigest(digest.Digest(l)); err != nil {
			return "", fmt.Errorf("new image: layer: %w", err)
		}
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, digest.Digest(l))
	}
	cfg.History = append(cfg.History, ocispec.History{CreatedBy: spec.CreatedBy, EmptyLayer: len(spec.Layers) == 0})
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
	for _, l := range cfg.RootFS.DiffIDs {
		d, err := s.layerDescriptor(l)
		if err != nil {
			return "", err
		}
		m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size})
	}
	data, _ := json.Marshal(cfg)
	cd, err := s.writeBlob(ocispec.MediaTypeImageConfig, data)
	if err != nil {
		return "", err
	}
	m.Config = cd
	data, _ = json.Marshal(m)
	md, err := s.writeBlob(ocispec.MediaTypeImageManifest, data)
	if err != nil {
		return "", err
	}
	id := strings.TrimPrefix(string(cd.Digest), "sha256:")
	idx, err := s.readIndex()
	if err != nil {
		return "", err
	}
	md.Annotations = map[string]string{}
	if parent != "" {
		md.Annotations[annotationParent] = parent
	}
	idx.Manifests = append(idx.Manifests, md)
	if err := s.writeIndex(dedupe(idx)); err != nil {
		return "", err
	}
	if spec.Name != "" {
		return id, s.setName(id, spec.Name)
	}
	return id, nil
}

// CacheGet returns the image id recorded for a build step's key, if that image is
// still stored.
func (s *Store) CacheGet(ctx context.Context, key string) (string, bool) {
	if !hex64.MatchString(key) {
		return "", false
	}
	data, err := os.ReadFile(filepath.Join(s.dir, "cache", key))
	if err != nil {
		return "", false
	}
	id := strings.TrimSpace(string(data))
	if in, err := s.Get(ctx, id); err != nil || in.ID != id {
		return "", false
	}
	return id, true
}

// CachePut records the image id a build step's key made.
func (s *Store) CachePut(key, id string) error {
	if !hex64.MatchString(key) {
		return fmt.Errorf("cache key %q is not a sha256", key)
	}
	return atomicfile.WriteFile(filepath.Join(s.dir, "cache", key), []byte(id+"\n"), 0o644)
}

// Remove removes an image (all its names), then its untagged ancestors that no other
// image builds on (a build's intermediate images, as docker rmi does), and then every
// blob, layer and cache entry nothing refers to any more. An image that is another's
// parent, or that a live sandbox uses (Options.InUse), is refused with
// engine.ErrInUse. It returns the ids removed.
func (s *Store) Remove(ctx context.Context, ref string) ([]string, error) {
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	in, err := s.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	var removed []string
	for {
		if err := s.removable(ctx, in); err != nil {
			if len(removed) == 0 {
				return nil, err
			}
			break // an ancestor still in use stays
		}
		if err := s.dropEntries(in.ID); err != nil {
			return removed, err
		}
		removed = append(removed, in.ID)
		if in.Parent == "" {
			break
		}
		if in, err = s.Get(ctx, in.Parent); err != nil || len(in.Names) > 0 {
			break
		}
	}
	return removed, s.collect(ctx)
}

// removable says why image in cannot go: it has children, or live sandboxes use it.
func (s *Store) removable(ctx context.Context, in Info) error {
	list, err := s.List(ctx)
	if err != nil {
		return err
	}
	var children []string
	for _, o := range list {
		if o.Parent == in.ID {
			children = append(children, short(o.ID))
		}
	}
	if len(children) > 0 {
		return fmt.Errorf("image %s is the parent of %s: %w", short(in.ID), strings.Join(children, ", "), engine.ErrInUse)
	}
	if s.inUse == nil {
		return nil
	}
	users, err := s.inUse(ctx, in.ID)
	if err != nil {
		return err
	}
	if len(users) > 0 {
		return fmt.Errorf("image %s is used by sandbox %s: %w", short(in.ID), strings.Join(users, ", "), engine.ErrInUse)
	}
	return nil
}

// dropEntries removes id's entries from the index (under the lock).
func (s *Store) dropEntries(id string) error {
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	kept := idx.Manifests[:0]
	for _, d := range idx.Manifests {
		if o, err := s.info(d); err != nil || o.ID != id {
			kept = append(kept, d)
		}
	}
	idx.Manifests = kept
	return s.writeIndex(idx)
}

func short(id string) string { return id[:min(12, len(id))] }

// collect removes blobs, layers and cache entries no stored image refers to.
func (s *Store) collect(ctx context.Context) error {
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	blobs, layers, ids := map[digest.Digest]bool{}, map[string]bool{}, map[string]bool{}
	for _, d := range idx.Manifests {
		var m ocispec.Manifest
		if err := s.readJSON(d, &m); err != nil {
			return err
		}
		var cfg ocispec.Image
		if err := s.readJSON(m.Config, &cfg); err != nil {
			return err
		}
		blobs[d.Digest], blobs[m.Config.Digest] = true, true
		ids[strings.TrimPrefix(string(m.Config.Digest), "sha256:")] = true
		for _, l := range m.Layers {
			blobs[l.Digest] = true
		}
		for _, l := range cfg.RootFS.DiffIDs {
			layers[strings.TrimPrefix(string(l), "sha256:")] = true
		}
	}
	var errs []error
	remove := func(dir string, keep func(name string) bool) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, e := range entries {
			if !keep(e.Name()) {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
			}
		}
	}
	// Blobs and layers younger than the grace period may belong to an import, pull or
	// build step of another process that has not named them in the index yet.
	recent := func(p string) bool {
		st, err := os.Stat(p)
		return err == nil && time.Since(st.ModTime()) < s.grace
	}
	blobDir, layerDir := filepath.Join(s.dir, "oci", "blobs", "sha256"), filepath.Join(s.dir, layersDir)
	remove(blobDir, func(n string) bool { return blobs[digest.Digest("sha256:"+n)] || recent(filepath.Join(blobDir, n)) })
	remove(layerDir, func(n string) bool {
		id := strings.TrimSuffix(n, ".json")
		return layers[id] || recent(filepath.Join(layerDir, id+".json"))
	})
	remove(filepath.Join(s.dir, "cache"), func(n string) bool {
		data, err := os.ReadFile(filepath.Join(s.dir, "cache", n))
		return err == nil && ids[strings.TrimSpace(string(data))]
	})
	return errors.Join(errs...)
}
