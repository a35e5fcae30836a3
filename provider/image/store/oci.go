package store

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Media types of Docker's image format, which registries still serve beside the OCI
// ones of image-spec, and the annotation this store adds to the OCI index.
const (
	dockerManifest  = "application/vnd.docker.distribution.manifest.v2+json"
	dockerList      = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerLayer     = "application/vnd.docker.image.rootfs.diff.tar"
	dockerLayerGzip = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	// annotationParent is the id of the image a build step started from.
	annotationParent = "dev.proliferate.image.parent"
)

// maxJSON bounds the index, manifests and configs read (they come from imported files).
const maxJSON = 4 << 20

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Config is the part of an OCI image configuration that says how to run the image.
type Config = ocispec.ImageConfig

func checkDigest(d digest.Digest) error {
	if !digestRE.MatchString(string(d)) {
		return fmt.Errorf("digest %q is not sha256:<64 hex>", d)
	}
	return nil
}

// blobPath is where the blob of digest d lives (d is checked first).
func (s *Store) blobPath(d digest.Digest) string {
	return filepath.Join(s.dir, "oci", "blobs", "sha256", strings.TrimPrefix(string(d), "sha256:"))
}

// writeBlob stores data and returns its descriptor.
func (s *Store) writeBlob(media string, data []byte) (ocispec.Descriptor, error) {
	d := ocispec.Descriptor{MediaType: media, Digest: digest.FromBytes(data), Size: int64(len(data))}
	p := s.blobPath(d.Digest)
	if _, err := os.Stat(p); err == nil {
		return d, nil
	}
	if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("write blob: %w", err)
	}
	return d, nil
}

// readJSON reads the blob of d (at most maxJSON bytes, digest verified) into v.
func (s *Store) readJSON(d ocispec.Descriptor, v any) error {
	if err := checkDigest(d.Digest); err != nil {
		return err
	}
	f, err := os.Open(s.blobPath(d.Digest))
	if err != nil {
		return fmt.Errorf("read blob %s: %w", d.Digest, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxJSON+1))
	if err != nil {
		return fmt.Errorf("read blob %s: %w", d.Digest, err)
	}
	if len(data) > maxJSON {
		return fmt.Errorf("blob %s is larger than %d bytes", d.Digest, maxJSON)
	}
	if digest.FromBytes(data) != d.Digest {
		return fmt.Errorf("blob %s does not match its digest", d.Digest)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parse blob %s: %w", d.Digest, err)
	}
	return nil
}

func (s *Store) readIndex() (ocispec.Index, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, "oci", "index.json"))
	if os.IsNotExist(err) {
		return ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex}, nil
	}
	if err != nil {
		return ocispec.Index{}, err
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return ocispec.Index{}, fmt.Errorf("parse index.json: %w", err)
	}
	return idx, nil
}

func (s *Store) writeIndex(idx ocispec.Index) error {
	idx.SchemaVersion, idx.MediaType = 2, ocispec.MediaTypeImageIndex
	if idx.Manifests == nil {
		idx.Manifests = []ocispec.Descriptor{}
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(s.dir, "oci", "index.json"), append(data, '\n'), 0o644)
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// strs are digests as strings.
func strs(ds []digest.Digest) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.String()
	}
	return out
}
