package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Media types and annotations of the OCI image spec this store reads and writes.
const (
	mediaIndex      = "application/vnd.oci.image.index.v1+json"
	mediaManifest   = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig     = "application/vnd.oci.image.config.v1+json"
	mediaLayer      = "application/vnd.oci.image.layer.v1.tar"
	mediaLayerGzip  = "application/vnd.oci.image.layer.v1.tar+gzip"
	mediaLayerZstd  = "application/vnd.oci.image.layer.v1.tar+zstd"
	dockerManifest  = "application/vnd.docker.distribution.manifest.v2+json"
	dockerList      = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerLayer     = "application/vnd.docker.image.rootfs.diff.tar"
	dockerLayerGzip = "application/vnd.docker.image.rootfs.diff.tar.gzip"
	annotationName  = "org.opencontainers.image.ref.name"
	// annotationParent is the id of the image a build step started from.
	annotationParent = "dev.proliferate.image.parent"
)

// maxJSON bounds the index, manifests and configs read (they come from imported files).
const maxJSON = 4 << 20

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

// Config is the part of an OCI image configuration that says how to run the image.
type Config struct {
	Env          []string            `json:"Env,omitempty"`
	WorkingDir   string              `json:"WorkingDir,omitempty"`
	User         string              `json:"User,omitempty"`
	Cmd          []string            `json:"Cmd,omitempty"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts,omitempty"`
}

type history struct {
	CreatedBy  string `json:"created_by,omitempty"`
	Comment    string `json:"comment,omitempty"`
	EmptyLayer bool   `json:"empty_layer,omitempty"`
}

type rootfs struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type imageConfig struct {
	Architecture string    `json:"architecture"`
	OS           string    `json:"os"`
	Config       Config    `json:"config"`
	RootFS       rootfs    `json:"rootfs"`
	History      []history `json:"history,omitempty"`
}

func checkDigest(d string) error {
	if !digestRE.MatchString(d) {
		return fmt.Errorf("digest %q is not sha256:<64 hex>", d)
	}
	return nil
}

// blobPath is where the blob of digest d lives (d is checked first).
func (s *Store) blobPath(d string) string {
	return filepath.Join(s.dir, "oci", "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
}

// writeBlob stores data and returns its descriptor.
func (s *Store) writeBlob(media string, data []byte) (descriptor, error) {
	sum := sha256.Sum256(data)
	d := descriptor{MediaType: media, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
	p := s.blobPath(d.Digest)
	if _, err := os.Stat(p); err == nil {
		return d, nil
	}
	if err := atomicfile.WriteFile(p, data, 0o644); err != nil {
		return descriptor{}, fmt.Errorf("write blob: %w", err)
	}
	return d, nil
}

// readJSON reads the blob of d (at most maxJSON bytes, digest verified) into v.
func (s *Store) readJSON(d descriptor, v any) error {
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
	if sum := sha256.Sum256(data); "sha256:"+hex.EncodeToString(sum[:]) != d.Digest {
		return fmt.Errorf("blob %s does not match its digest", d.Digest)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parse blob %s: %w", d.Digest, err)
	}
	return nil
}

func (s *Store) readIndex() (index, error) {
	data, err := os.ReadFile(filepath.Join(s.dir, "oci", "index.json"))
	if os.IsNotExist(err) {
		return index{SchemaVersion: 2, MediaType: mediaIndex}, nil
	}
	if err != nil {
		return index{}, err
	}
	var idx index
	if err := json.Unmarshal(data, &idx); err != nil {
		return index{}, fmt.Errorf("parse index.json: %w", err)
	}
	return idx, nil
}

func (s *Store) writeIndex(idx index) error {
	idx.SchemaVersion, idx.MediaType = 2, mediaIndex
	if idx.Manifests == nil {
		idx.Manifests = []descriptor{}
	}
	data, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(s.dir, "oci", "index.json"), append(data, '\n'), 0o644)
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
