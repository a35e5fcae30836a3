// Package store is the local image store: OCI images in an image layout on disk, their
// layers also unpacked once into read-only overlayfs-form folders that an engine stacks
// as lowerdirs (Store implements engine.ImageResolver), and the build cache that maps a
// step's content key (provider/image) to the image it made.
//
// Layout of the data dir:
//
//	oci/             an OCI image layout (oci-layout, index.json, blobs/sha256/…);
//	                 index.json names images (org.opencontainers.image.ref.name)
//	layers-100000/<diffid>  a layer unpacked, OCI whiteouts turned into overlayfs
//	                 ones, its files owned from host id 100000 (rules.HostIDBase) on
//	layers-100000/<diffid>.json  the descriptor of the layer's blob
//	cache/<key>      the image id a build step with that key made
//	tmp/             staging; a layer appears under layers/ only complete (rename)
//	lock             flock held by every change
//
// The data dir and everything in it are private to the user who owns it (0700), from
// the first Open on: an image's files are no other host user's business. The files
// of an unpacked layer are owned by the sandboxes' host ids (rules.HostIDBase + the
// id in the image), never by the host's root: a setuid-root program of an image is
// setuid to an unprivileged host id outside any sandbox, and root's inside one whose
// user namespace maps 0 to rules.HostIDBase. An engine mounts the layers as they are
// (no id-mapped mount). The folder's name carries the id base: the layers/ of older
// versions (owned by the host's root) are never booted; a layer missing from the
// current folder is unpacked again from its blob when an image needs it.
//
// An image's id is the digest of its configuration (hex), so the same layers and
// configuration are the same id. Imported tarballs and layer tars are untrusted: entries
// that would write outside their layer are refused (ErrUnsafeEntry).
package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Options configure a Store.
type Options struct {
	// Dir is the store's data dir (required); created if missing.
	Dir string
	// InUse returns the live sandboxes that boot from image id; Remove refuses an image
	// in use. Nil: no engine is asked.
	InUse func(ctx context.Context, id string) ([]string, error)
	// GCGrace: Remove's clean-up leaves blobs and layers younger than this, which an
	// import, pull or build in another process may be about to name. Zero means 10
	// minutes; negative means none.
	GCGrace time.Duration
}

// Store is a local image store. Its methods are safe for concurrent use, also by
// several processes sharing Dir.
type Store struct {
	dir   string
	inUse func(ctx context.Context, id string) ([]string, error)
	grace time.Duration
}

var _ engine.ImageResolver = (*Store)(nil)

// Info describes a stored image.
type Info struct {
	ID string `json:"id"`
	// Names are the image's names (tags), sorted.
	Names []string `json:"names,omitempty"`
	// Parent is the image a build step started from, if any.
	Parent string `json:"parent,omitempty"`
	// Layers are the layers' diff ids (sha256:…), lowest first.
	Layers []string `json:"layers"`
	// Size is the sum of the layer blobs' sizes.
	Size   int64  `json:"size"`
	Config Config `json:"config"`
}

// Open opens (and creates) the store in o.Dir.
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("image store: no data dir")
	}
	// Private from the first command on, also when Dir (or the data dir above it)
	// was made before by something else with a laxer mode.
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	if err := os.Chmod(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("image store: make %s private: %w", o.Dir, err)
	}
	for _, d := range []string{"oci/blobs/sha256", layersDir, "cache", "tmp"} {
		if err := os.MkdirAll(filepath.Join(o.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	layout := filepath.Join(o.Dir, "oci", "oci-layout")
	if _, err := os.Stat(layout); os.IsNotExist(err) {
		if err := os.WriteFile(layout, []byte(`{"imageLayoutVersion":"1.0.0"}`+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("image store: %w", err)
		}
	}
	switch {
	case o.GCGrace == 0:
		o.GCGrace = 10 * time.Minute
	case o.GCGrace < 0:
		o.GCGrace = 0
	}
	return &Store{dir: o.Dir, inUse: o.InUse, grace: o.GCGrace}, nil
}

// layersDir is the folder of the unpacked layers, named for the host id their files
// are owned from (LayerID); oldLayersDir held layers owned by the host's root.
var layersDir = "layers-" + strconv.Itoa(rules.HostIDBase)

const oldLayersDir = "layers"

// Dir is the store's data dir.
func (s *Store) Dir() string { return s.dir }

// lock takes the store's lock (a file lock, held across processes) until unlock.
func (s *Store) lock() (unlock func(), err error) {
	f, err := lockedfile.OpenFile(filepath.Join(s.dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock image store: %w", err)
	}
	return func() { f.Close() }, nil
}

// List returns every image, sorted by id.
func (s *Store) List(ctx context.Context) ([]Info, error) {
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	byID := map[string]*Info{}
	for _, d := range idx.Manifests {
		info, err := s.info(d)
		if err != nil {
			return nil, err
		}
		if have, ok := byID[info.ID]; ok {
			have.Names = append(have.Names, info.Names...)
			continue
		}
		byID[info.ID] = &info
	}
	list := make([]Info, 0, len(byID))
	for _, id := range slices.Sorted(mapsKeys(byID)) {
		in := byID[id]
		slices.Sort(in.Names)
		list = append(list, *in)
	}
	return list, nil
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// info reads the manifest and configuration behind an index entry.
func (s *Store) info(d ocispec.Descriptor) (Info, error) {
	var m ocispec.Manifest
	if err := s.readJSON(d, &m); err != nil {
		return Info{}, err
	}
	var cfg ocispec.Image
	if err := s.readJSON(m.Config, &cfg); err != nil {
		return Info{}, err
	}
	in := Info{ID: strings.TrimPrefix(string(m.Config.Digest), "sha256:"), Parent: d.Annotations[annotationParent],
		Layers: strs(cfg.RootFS.DiffIDs), Config: cfg.Config}
	if n := d.Annotations[ocispec.AnnotationRefName]; n != "" {
		in.Names = []string{n}
	}
	for _, l := range m.Layers {
		in.Size += l.Size
	}
	return in, nil
}

// Get finds an image by name, full id (with or without "sha256:") or a unique id
// prefix of at least 4 characters; engine.ErrNotFound when there is none.
func (s *Store) Get(ctx context.Context, ref string) (Info, error) {
	list, err := s.List(ctx)
	if err != nil {
		return Info{}, err
	}
	id := strings.TrimPrefix(ref, "sha256:")
	var match []Info
	for _, in := range list {
		if slices.Contains(in.Names, ref) || in.ID == id {
			return in, nil
		}
		if len(id) >= 4 && strings.HasPrefix(in.ID, id) {
			match = append(match, in)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return Info{}, fmt.Errorf("image %q: %w", ref, engine.ErrNotFound)
	}
	return Info{}, fmt.Errorf("image %q: the prefix matches %d images", ref, len(match))
}

// ResolveImage returns the image's unpacked layers and configuration.
func (s *Store) ResolveImage(ctx context.Context, ref string) (engine.RootFS, error) {
	in, err := s.Get(ctx, ref)
	if err != nil {
		return engine.RootFS{}, err
	}
	fs := engine.RootFS{ID: in.ID, Env: in.Config.Env, WorkDir: in.Config.WorkingDir, User: in.Config.User}
	for _, l := range in.Layers {
		dir, err := s.ensureLayer(digest.Digest(l))
		if err != nil {
			return engine.RootFS{}, fmt.Errorf("image %s: layer %s is not unpacked: %w", in.ID, l, err)
		}
		fs.Layers = append(fs.Layers, dir)
	}
	return fs, nil
}

// ensureLayer returns the unpacked folder of layer diffID, unpacking it from its blob
// first when it is missing (a store of an older version unpacked it elsewhere).
func (s *Store) ensureLayer(diffID digest.Digest) (string, error) {
	if err := checkDigest(diffID); err != nil {
		return "", err
	}
	dir := s.layerDir(diffID)
	if _, err := os.Stat(dir); err == nil {
		return dir, nil
	}
	d, err := s.layerDescriptor(diffID)
	if err != nil {
		return "", err
	}
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	got, err := s.unpackBlob(d)
	if err != nil {
		return "", err
	}
	if got != diffID {
		return "", fmt.Errorf("blob %s unpacks to layer %s, not %s", d.Digest, got, diffID)
	}
	return dir, nil
}

func (s *Store) layerDir(diffID digest.Digest) string {
	return filepath.Join(s.dir, layersDir, strings.TrimPrefix(string(diffID), "sha256:"))
}

// Tag names image id; the name moves from any image that had it.
func (s *Store) Tag(ctx context.Context, ref, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	in, err := s.Get(ctx, ref)
	if err != nil {
		return err
	}
	return s.setName(in.ID, name)
}

var hex64 = regexp.MustCompile(`^(sha256:)?[0-9a-f]{64}$`)

func checkName(name string) error {
	if name == "" || len(name) > 255 || strings.HasPrefix(name, "-") || hex64.MatchString(name) {
		return fmt.Errorf("image name %q is not valid", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-:/@", c)) {
			return fmt.Errorf("image name %q may contain only letters, digits and ._-:/@", name)
		}
	}
	return nil
}

// setName points name at id (under the lock): other entries lose the name; an entry of
// id without a name takes it, else a new entry is added.
func (s *Store) setName(id, name string) error {
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	var entry *ocispec.Descriptor
	for i := range idx.Manifests {
		d := &idx.Manifests[i]
		in, err := s.info(*d)
		if err != nil {
			return err
		}
		if d.Annotations[ocispec.AnnotationRefName] == name && in.ID != id {
			delete(d.Annotations, ocispec.AnnotationRefName)
		}
		if in.ID == id && (entry == nil || d.Annotations[ocispec.AnnotationRefName] == name) {
			entry = d
		}
	}
	if entry == nil {
		return fmt.Errorf("image %s: %w", id, engine.ErrNotFound)
	}
	if n := entry.Annotations[ocispec.AnnotationRefName]; n != "" && n != name {
		e := *entry
		e.Annotations = cloneMap(entry.Annotations)
		e.Annotations[ocispec.AnnotationRefName] = name
		idx.Manifests = append(idx.Manifests, e)
	} else {
		if entry.Annotations == nil {
			entry.Annotations = map[string]string{}
		}
		entry.Annotations[ocispec.AnnotationRefName] = name
	}
	return s.writeIndex(dedupe(idx))
}

// dedupe drops unnamed entries of images that also have a named one, and repeated
// entries.
func dedupe(idx ocispec.Index) ocispec.Index {
	named := map[digest.Digest]bool{}
	for _, d := range idx.Manifests {
		if d.Annotations[ocispec.AnnotationRefName] != "" {
			named[d.Digest] = true
		}
	}
	seen := map[string]bool{}
	out := idx.Manifests[:0]
	for _, d := range idx.Manifests {
		k := d.Digest.String() + "\x00" + d.Annotations[ocispec.AnnotationRefName]
		if seen[k] || d.Annotations[ocispec.AnnotationRefName] == "" && named[d.Digest] {
			continue
		}
		seen[k] = true
		out = append(out, d)
	}
	idx.Manifests = out
	return idx
}

func cloneMap(m map[string]string) map[string]string {
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
