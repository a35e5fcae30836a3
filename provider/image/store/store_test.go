package store

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func digestOf(b []byte) digest.Digest { return digest.FromBytes(b) }

// ociArchive is an OCI image layout tar of one image whose layers are the given layer
// tars (gzipped), named name (an index annotation) when set.
func ociArchive(t testing.TB, name string, cfg Config, layers ...[]byte) []byte {
	t.Helper()
	blobs, ib := ociBlobs(name, cfg, layers...)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(n string, b []byte) {
		tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg})
		tw.Write(b)
	}
	add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	for d, b := range blobs {
		add("blobs/sha256/"+d.Encoded(), b)
	}
	add("index.json", ib)
	tw.Close()
	return buf.Bytes()
}

// ociBlobs are the blobs (by digest) and the index.json of one image.
func ociBlobs(name string, cfg Config, layers ...[]byte) (map[digest.Digest][]byte, []byte) {
	blobs := map[digest.Digest][]byte{}
	ic := ocispec.Image{Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"}, Config: cfg, RootFS: ocispec.RootFS{Type: "layers"}}
	m := ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest}
	for _, l := range layers {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(l)
		zw.Close()
		d := digestOf(gz.Bytes())
		blobs[d] = gz.Bytes()
		ic.RootFS.DiffIDs = append(ic.RootFS.DiffIDs, digestOf(l))
		m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: d, Size: int64(gz.Len())})
	}
	cb, _ := json.Marshal(ic)
	blobs[digestOf(cb)] = cb
	m.Config = ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: digestOf(cb), Size: int64(len(cb))}
	mb, _ := json.Marshal(m)
	blobs[digestOf(mb)] = mb
	md := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digestOf(mb), Size: int64(len(mb))}
	if name != "" {
		md.Annotations = map[string]string{ocispec.AnnotationRefName: name}
	}
	ib, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{md}})
	return blobs, ib
}

func openStore(t *testing.T) *Store {
	t.Helper()
	s, err := Open(Options{Dir: t.TempDir(), GCGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestImportResolve(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	base := layerTar(t, entry{name: "etc/", typ: tar.TypeDir}, entry{name: "etc/os-release", body: "test\n"}, entry{name: "etc/motd", body: "hi"})
	top := layerTar(t, entry{name: "etc/.wh.motd"}, entry{name: "app", body: "app"})
	cfg := Config{Env: []string{"PATH=/usr/bin"}, WorkingDir: "/w", User: "1000"}
	ids, err := s.Import(ctx, bytes.NewReader(ociArchive(t, "test:1", cfg, base, top)), "")
	if err != nil || len(ids) != 1 {
		t.Fatalf("Import = %v, %v", ids, err)
	}
	// The same tarball again: the same id, nothing new.
	again, err := s.Import(ctx, bytes.NewReader(ociArchive(t, "test:1", cfg, base, top)), "other")
	if err != nil || again[0] != ids[0] {
		t.Fatalf("second Import = %v, %v; want %s", again, err, ids[0])
	}
	for _, ref := range []string{"test:1", "other", ids[0], "sha256:" + ids[0], ids[0][:8]} {
		fs, err := s.ResolveImage(ctx, ref)
		if err != nil {
			t.Fatalf("ResolveImage(%q) = %v", ref, err)
		}
		if fs.ID != ids[0] || len(fs.Layers) != 2 || fs.WorkDir != "/w" || fs.User != "1000" || fs.Env[0] != "PATH=/usr/bin" {
			t.Errorf("ResolveImage(%q) = %+v", ref, fs)
		}
		for _, l := range fs.Layers {
			if st, err := os.Stat(l); err != nil || st.Mode().Perm() != 0o755 {
				t.Errorf("layer folder %s: %v, mode %v; want 0755", l, err, st.Mode())
			}
		}
		if b, err := os.ReadFile(filepath.Join(fs.Layers[0], "etc/os-release")); err != nil || string(b) != "test\n" {
			t.Errorf("lower layer etc/os-release = %q, %v", b, err)
		}
		if !isWhiteout(filepath.Join(fs.Layers[1], "etc/motd")) {
			t.Errorf("upper layer has no whiteout for etc/motd")
		}
	}
	if _, err := s.ResolveImage(ctx, "nope"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("ResolveImage(nope) = %v, want ErrNotFound", err)
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || strings.Join(list[0].Names, ",") != "other,test:1" {
		t.Errorf("List = %+v, %v", list, err)
	}
}

func TestImportRejects(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	good := ociArchive(t, "", Config{}, layerTar(t, entry{name: "f", body: "x"}))
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"not a tar", []byte("hello")},
		{"no index", layerTar(t, entry{name: "oci-layout", body: "{}"})},
		{"bad blob digest", layerTar(t, entry{name: "blobs/sha256/" + strings.Repeat("0", 64), body: "x"}, entry{name: "index.json", body: `{"manifests":[]}`})},
		{"escaping layer", ociArchive(t, "", Config{}, layerTar(t, entry{name: "../x", body: "x"}))},
		{"truncated", good[:len(good)/2]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t)
			if _, err := s.Import(ctx, bytes.NewReader(tc.data), ""); err == nil {
				t.Errorf("Import = nil error")
			}
			if list, _ := s.List(ctx); len(list) != 0 {
				t.Errorf("List after a failed import = %v", list)
			}
		})
	}
}

func TestBuildChainAndRemove(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	users := map[string][]string{}
	s.inUse = func(_ context.Context, id string) ([]string, error) { return users[id], nil }
	base, err := s.ImportRootFS(ctx, bytes.NewReader(layerTar(t, entry{name: "etc/os-release", body: "base"})), "base:1", Config{Env: []string{"A=1"}}, "rootfs")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "upper")
	os.MkdirAll(filepath.Join(dir, "opt"), 0o755)
	os.WriteFile(filepath.Join(dir, "opt", "tool"), []byte("tool"), 0o755)
	diffID, err := s.CommitLayer(ctx, dir, CommitOptions{Move: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("CommitLayer left its folder: %v", err)
	}
	child, err := s.NewImage(ctx, ImageSpec{Parent: "base:1", Layers: []string{diffID}, Config: Config{Env: []string{"A=1"}}, CreatedBy: "RUN x", Name: "child"})
	if err != nil {
		t.Fatal(err)
	}
	same, err := s.NewImage(ctx, ImageSpec{Parent: base, Layers: []string{diffID}, Config: Config{Env: []string{"A=1"}}, CreatedBy: "RUN x"})
	if err != nil || same != child {
		t.Errorf("NewImage of the same parent, layer and config = %s, %v; want %s", same, err, child)
	}
	fs, err := s.ResolveImage(ctx, "child")
	if err != nil || len(fs.Layers) != 2 {
		t.Fatalf("ResolveImage(child) = %+v, %v", fs, err)
	}
	if b, _ := os.ReadFile(filepath.Join(fs.Layers[1], "opt/tool")); string(b) != "tool" {
		t.Errorf("committed layer opt/tool = %q", b)
	}
	if err := s.CachePut(strings.Repeat("a", 64), child); err != nil {
		t.Fatal(err)
	}
	if id, ok := s.CacheGet(ctx, strings.Repeat("a", 64)); !ok || id != child {
		t.Errorf("CacheGet = %q, %v", id, ok)
	}
	if _, err := s.Remove(ctx, "base:1"); !errors.Is(err, engine.ErrInUse) || !strings.Contains(err.Error(), child[:12]) {
		t.Errorf("Remove(parent) = %v, want ErrInUse naming the child", err)
	}
	users[child] = []string{"sb-1"}
	if _, err := s.Remove(ctx, "child"); !errors.Is(err, engine.ErrInUse) || !strings.Contains(err.Error(), "sb-1") {
		t.Errorf("Remove(used image) = %v, want ErrInUse naming sb-1", err)
	}
	delete(users, child)
	if ids, err := s.Remove(ctx, "child"); err != nil || len(ids) != 1 || ids[0] != child {
		t.Fatalf("Remove(child) = %v, %v; want [%s] (its tagged parent stays)", ids, err, child)
	}
	if _, err := os.Stat(s.layerDir(digest.Digest(diffID))); !os.IsNotExist(err) {
		t.Errorf("the child's own layer survived its removal: %v", err)
	}
	// With a grace period, a young unreferenced layer is kept (another process's build
	// step may be about to name it).
	graced, _ := Open(Options{Dir: s.Dir()})
	young := filepath.Join(t.TempDir(), "young")
	os.MkdirAll(filepath.Join(young, "y"), 0o755)
	youngID, err := graced.CommitLayer(ctx, young, CommitOptions{Move: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := graced.collect(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(graced.layerDir(digest.Digest(youngID))); err != nil {
		t.Errorf("collect removed a layer younger than the grace period: %v", err)
	}
	if err := s.collect(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.CacheGet(ctx, strings.Repeat("a", 64)); ok {
		t.Errorf("the cache still points at a removed image")
	}
	if _, err := s.Remove(ctx, "base:1"); err != nil {
		t.Fatalf("Remove(base) = %v", err)
	}
	for _, sub := range []string{layersDir, "oci/blobs/sha256", "cache"} {
		if ents, err := os.ReadDir(filepath.Join(s.Dir(), sub)); err != nil || len(ents) != 0 {
			t.Errorf("%s is not empty after removing every image: %v", sub, ents)
		}
	}
}

func TestTag(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	a, _ := s.ImportRootFS(ctx, bytes.NewReader(layerTar(t, entry{name: "a", body: "a"})), "x", Config{}, "a")
	b, _ := s.ImportRootFS(ctx, bytes.NewReader(layerTar(t, entry{name: "b", body: "b"})), "", Config{}, "b")
	if err := s.Tag(ctx, b, "x"); err != nil {
		t.Fatal(err)
	}
	if in, _ := s.Get(ctx, "x"); in.ID != b {
		t.Errorf("x = %s after moving the tag, want %s", in.ID, b)
	}
	if in, err := s.Get(ctx, a); err != nil || len(in.Names) != 0 {
		t.Errorf("old image = %+v, %v; want it kept without names", in, err)
	}
	for _, bad := range []string{"", "-x", "a b", strings.Repeat("f", 64)} {
		if err := s.Tag(ctx, b, bad); err == nil {
			t.Errorf("Tag(%q) = nil error", bad)
		}
	}
}

// FuzzImport: whatever the tarball, Import fails or stores images whose layers are
// inside the store, and never writes outside its data dir.
func FuzzImport(f *testing.F) {
	f.Add(ociArchive(f, "x:1", Config{}, layerTar(f, entry{name: "a", body: "a"}, entry{name: ".wh.b"})))
	f.Add(ociArchive(f, "", Config{}, layerTar(f, entry{name: "l", typ: tar.TypeSymlink, link: "/"}, entry{name: "l/x", body: "x"})))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		s, err := Open(Options{Dir: filepath.Join(root, "store")})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := s.Import(context.Background(), bytes.NewReader(data), "")
		if ents, _ := os.ReadDir(root); len(ents) != 1 {
			t.Fatalf("Import wrote next to the store: %v", ents)
		}
		if err != nil {
			return
		}
		for _, id := range ids {
			fs, err := s.ResolveImage(context.Background(), id)
			if err != nil {
				t.Fatalf("ResolveImage(%s) of an imported image = %v", id, err)
			}
			for _, l := range fs.Layers {
				if !strings.HasPrefix(l, filepath.Join(root, "store", layersDir)+"/") {
					t.Fatalf("layer %s is outside the store", l)
				}
			}
		}
	})
}

// TestNewImageRejectsBadLayers: a layer that is not a sha256 diff id never
// becomes a path in the store.
func TestNewImageRejectsBadLayers(t *testing.T) {
	s := openStore(t)
	for _, l := range []string{"", "abc", "sha256:../../etc", "sha512:" + strings.Repeat("a", 128)} {
		if _, err := s.NewImage(t.Context(), ImageSpec{Layers: []string{l}}); err == nil || !strings.Contains(err.Error(), "is not sha256") {
			t.Errorf("NewImage(layer %q) = %v, want a digest error", l, err)
		}
	}
}
