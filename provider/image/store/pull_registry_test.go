package store_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// TestPullDockerManifest: an image in Docker's format (go-containerregistry's random
// image is one) is listed in the store's OCI index under its manifest's own media
// type, as the image layout requires, not the OCI one.
func TestPullDockerManifest(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unpacking layers with their owners needs root")
	}
	ref := imagetest.Registry(t, "test/docker:1", 1024, 1)
	s, err := store.Open(store.Options{Dir: t.TempDir(), GCGrace: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pull(t.Context(), ref, store.PullOptions{}); err != nil {
		t.Fatalf("Pull(%s) = %v", ref, err)
	}
	data, err := os.ReadFile(filepath.Join(s.Dir(), "oci", "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(data, &idx); err != nil {
		t.Fatal(err)
	}
	const docker = "application/vnd.docker.distribution.manifest.v2+json"
	if len(idx.Manifests) != 1 || idx.Manifests[0].MediaType != docker {
		t.Errorf("index.json manifests = %+v, want one of media type %s", idx.Manifests, docker)
	}
}

// BenchmarkPull pulls a 3-layer, 24 MB image from a registry on loopback into a new
// store each time (download, digest checks, unpacking).
func BenchmarkPull(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("unpacking layers with their owners needs root")
	}
	ref := imagetest.Registry(b, "bench/img:1", 8<<20, 3)
	b.SetBytes(3 * 8 << 20)
	for b.Loop() {
		b.StopTimer()
		s, err := store.Open(store.Options{Dir: b.TempDir(), GCGrace: -1})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.Pull(b.Context(), ref, store.PullOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
