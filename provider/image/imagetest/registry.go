package imagetest

import (
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry starts a registry on loopback for t (go-containerregistry's own, in
// memory, stopped when t ends), pushes to it an image of random layers, each of
// layerSize bytes, as repo ("test/pull:1"), and returns the image's reference.
func Registry(t testing.TB, repo string, layerSize, layers int64) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/" + repo
	img, err := random.Image(layerSize, layers)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the test image to %s: %v", ref, err)
	}
	return ref
}
