package store

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Import reads an OCI image layout as a tar (optionally gzip-compressed: an OCI
// tarball, `docker save` of Docker 25+, `skopeo copy … oci-archive:`), stores its blobs
// after checking their digests, unpacks its layers and returns the ids of the images it
// names. name, when set, names the (single) image; otherwise the tarball's
// org.opencontainers.image.ref.name annotations are kept.
func (s *Store) Import(ctx context.Context, r io.Reader, name string) ([]string, error) {
	if name != "" {
		if err := checkName(name); err != nil {
			return nil, err
		}
	}
	idx, err := s.readArchive(r)
	if err != nil {
		return nil, err
	}
	unlock, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	var ids []string
	for _, d := range idx.Manifests {
		m, err := s.pickManifest(d)
		if err != nil {
			return nil, err
		}
		id, err := s.importManifest(ctx, m, d.Annotations[ocispec.AnnotationRefName], name, len(idx.Manifests))
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, errors.New("import: the tarball's index.json names no image")
	}
	return ids, nil
}

// readArchive stores the blobs of an image layout tar and returns its index.
func (s *Store) readArchive(r io.Reader) (ocispec.Index, error) {
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return ocispec.Index{}, fmt.Errorf("import: %w", err)
		}
		defer zr.Close()
		src = zr
	}
	tr := tar.NewReader(src)
	var idx ocispec.Index
	haveIndex := false
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return ocispec.Index{}, fmt.Errorf("import: read tarball: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(hdr.Name, "./"))
		switch {
		case hdr.Typeflag != tar.TypeReg:
		case name == "index.json":
			if hdr.Size > maxJSON {
				return ocispec.Index{}, errors.New("import: index.json is too large")
			}
			if err := decodeJSON(tr, &idx); err != nil {
				return ocispec.Index{}, fmt.Errorf("import: index.json: %w", err)
			}
			haveIndex = true
		case strings.HasPrefix(name, "blobs/sha256/"):
			if err := s.storeBlob(tr, digest.Digest("sha256:"+strings.TrimPrefix(name, "blobs/sha256/"))); err != nil {
				return ocispec.Index{}, err
			}
		}
	}
	if !haveIndex {
		return ocispec.Index{}, errors.New("import: not an OCI image layout (no index.json); save the image as an OCI archive")
	}
	return idx, nil
}

// storeBlob copies r into the blob store under digest d, checking the digest.
func (s *Store) storeBlob(r io.Reader, d digest.Digest) error {
	if err := checkDigest(d); err != nil {
		return fmt.Errorf("store blob: %w", err)
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	hw := newHashWriter()
	if _, err := io.Copy(io.MultiWriter(f, hw), r); err != nil {
		return fmt.Errorf("store blob %s: %w", d, err)
	}
	if got := hw.digest(); got != d {
		return fmt.Errorf("store blob %s: its content has digest %s", d, got)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), s.blobPath(d))
}

func decodeJSON(r io.Reader, v any) error {
	data, err := io.ReadAll(io.LimitReader(r, maxJSON+1))
	if err != nil {
		return err
	}
	if len(data) > maxJSON {
		return errors.New("too large")
	}
	return jsonUnmarshal(data, v)
}

// pickManifest follows an image index to the manifest of this machine's platform.
func (s *Store) pickManifest(d ocispec.Descriptor) (ocispec.Descriptor, error) {
	for depth := 0; depth < 4; depth++ {
		switch d.MediaType {
		case ocispec.MediaTypeImageManifest, dockerManifest:
			return d, nil
		case ocispec.MediaTypeImageIndex, dockerList:
			var idx ocispec.Index
			if err := s.readJSON(d, &idx); err != nil {
				return ocispec.Descriptor{}, err
			}
			found := false
			for _, m := range idx.Manifests {
				if m.Platform == nil || m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH {
					ann := d.Annotations
					d, found = m, true
					if d.Annotations == nil {
						d.Annotations = ann
					}
					break
				}
			}
			if !found {
				return ocispec.Descriptor{}, fmt.Errorf("import: no linux/%s image in %s", runtime.GOARCH, d.Digest)
			}
		default:
			return ocispec.Descriptor{}, fmt.Errorf("import: %s has media type %q, not an image manifest", d.Digest, d.MediaType)
		}
	}
	return ocispec.Descriptor{}, errors.New("import: image indexes nested too deep")
}

// importManifest unpacks a manifest's layers, checks them against its configuration's
// diff ids, and adds it to the index (named name, else tarName).
func (s *Store) importManifest(ctx context.Context, d ocispec.Descriptor, tarName, name string, count int) (string, error) {
	var m ocispec.Manifest
	if err := s.readJSON(d, &m); err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	var cfg ocispec.Image
	if err := s.readJSON(m.Config, &cfg); err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return "", fmt.Errorf("import: %s has %d layers and %d diff ids", d.Digest, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		if err := checkDigest(l.Digest); err != nil {
			return "", fmt.Errorf("import: %w", err)
		}
		if err := checkDigest(cfg.RootFS.DiffIDs[i]); err != nil {
			return "", fmt.Errorf("import: diff id: %w", err)
		}
		if _, err := os.Stat(s.layerDir(cfg.RootFS.DiffIDs[i])); err == nil {
			continue
		}
		diffID, err := s.unpackBlob(l)
		if err != nil {
			return "", fmt.Errorf("import: %w", err)
		}
		if diffID != cfg.RootFS.DiffIDs[i] {
			return "", fmt.Errorf("import: layer %s unpacks to %s, the configuration says %s", l.Digest, diffID, cfg.RootFS.DiffIDs[i])
		}
	}
	id := strings.TrimPrefix(string(m.Config.Digest), "sha256:")
	idx, err := s.readIndex()
	if err != nil {
		return "", err
	}
	// The manifest's own media type: a registry's image may be in Docker's format.
	idx.Manifests = append(idx.Manifests, ocispec.Descriptor{MediaType: d.MediaType, Digest: d.Digest, Size: d.Size})
	if err := s.writeIndex(dedupe(idx)); err != nil {
		return "", err
	}
	switch {
	case name != "" && count == 1:
		return id, s.setName(id, name)
	case tarName != "" && checkName(tarName) == nil:
		return id, s.setName(id, tarName)
	}
	return id, nil
}

// ImportRootFS stores the uncompressed tar of a whole root filesystem (mmdebstrap's
// output) as a one-layer image named name, with configuration cfg.
func (s *Store) ImportRootFS(ctx context.Context, r io.Reader, name string, cfg Config, createdBy string) (string, error) {
	f, err := os.CreateTemp(filepath.Join(s.dir, "tmp"), "blob-")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	hw := newHashWriter()
	if _, err := io.Copy(io.MultiWriter(f, hw), r); err != nil {
		return "", fmt.Errorf("import root filesystem: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	d := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: hw.digest(), Size: hw.n}
	if err := os.Rename(f.Name(), s.blobPath(d.Digest)); err != nil {
		return "", err
	}
	unlock, err := s.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	diffID, err := s.unpackBlob(d)
	if err != nil {
		return "", fmt.Errorf("import root filesystem: %w", err)
	}
	return s.newImage(ctx, ImageSpec{Layers: []string{diffID.String()}, Config: cfg, CreatedBy: createdBy, Name: name})
}
