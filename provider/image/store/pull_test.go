package store

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	for _, tc := range []struct {
		in   string
		want Ref
		err  bool
	}{
		{"debian", Ref{"registry-1.docker.io", "library/debian", "latest", ""}, false},
		{"debian:bookworm-slim", Ref{"registry-1.docker.io", "library/debian", "bookworm-slim", ""}, false},
		{"user/app:1", Ref{"registry-1.docker.io", "user/app", "1", ""}, false},
		{"ghcr.io/org/app:v1.2", Ref{"ghcr.io", "org/app", "v1.2", ""}, false},
		{"localhost:5000/app", Ref{"localhost:5000", "app", "latest", ""}, false},
		{"app@" + d, Ref{"registry-1.docker.io", "library/app", "", d}, false},
		{"App", Ref{}, true},
		{"app:bad tag", Ref{}, true},
		{"app@sha256:short", Ref{}, true},
		{"../x", Ref{}, true},
	} {
		got, err := ParseRef(tc.in)
		if (err != nil) != tc.err || !tc.err && got != tc.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// registryServer serves one image (under an index, behind a Bearer token) like a
// registry; tamper changes a served layer's bytes.
func registryServer(t *testing.T, tamper bool) *httptest.Server {
	blobs, _ := ociBlobs("", Config{Env: []string{"A=1"}}, layerTar(t, entry{name: "etc/pulled", body: "yes"}))
	var manifestDigest string
	for d, b := range blobs {
		if strings.Contains(string(b), `"schemaVersion"`) {
			manifestDigest = d
		}
	}
	idx, _ := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{
		{MediaType: mediaManifest, Digest: "sha256:" + strings.Repeat("0", 64), Size: 1, Platform: &platform{Architecture: "s390x", OS: "linux"}},
		{MediaType: mediaManifest, Digest: manifestDigest, Size: int64(len(blobs[manifestDigest])), Platform: &platform{Architecture: runtime.GOARCH, OS: "linux"}},
	}})
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			if r.URL.Query().Get("scope") != "repository:test/img:pull" {
				http.Error(w, "bad scope", http.StatusBadRequest)
				return
			}
			w.Write([]byte(`{"token":"t0k"}`))
			return
		}
		if r.Header.Get("Authorization") != "Bearer t0k" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+srv.URL+`/token",service="test",scope="repository:test/img:pull"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch p := strings.TrimPrefix(r.URL.Path, "/v2/test/img/"); {
		case p == "manifests/1":
			w.Header().Set("Content-Type", mediaIndex)
			w.Write(idx)
		case strings.HasPrefix(p, "manifests/") || strings.HasPrefix(p, "blobs/"):
			b, ok := blobs[strings.TrimPrefix(strings.TrimPrefix(p, "manifests/"), "blobs/")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			if tamper && strings.HasPrefix(p, "blobs/") && b[0] == 0x1f {
				b = append([]byte{}, b...)
				b[len(b)-1] ^= 1
			}
			w.Write(b)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPull(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	srv := registryServer(t, false)
	host := strings.TrimPrefix(srv.URL, "http://")
	s := openStore(t)
	id, err := s.Pull(ctx, host+"/test/img:1", srv.Client())
	if err != nil {
		t.Fatalf("Pull = %v", err)
	}
	fs, err := s.ResolveImage(ctx, host+"/test/img:1")
	if err != nil || fs.ID != id || strings.Join(fs.Env, ",") != "A=1" {
		t.Fatalf("ResolveImage = %+v, %v", fs, err)
	}
	if b, err := os.ReadFile(filepath.Join(fs.Layers[0], "etc/pulled")); err != nil || string(b) != "yes" {
		t.Errorf("pulled layer etc/pulled = %q, %v", b, err)
	}
	if again, err := s.Pull(ctx, host+"/test/img:1", srv.Client()); err != nil || again != id {
		t.Errorf("second Pull = %s, %v; want %s", again, err, id)
	}
}

func TestPullFails(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	tampered := registryServer(t, true)
	if _, err := openStore(t).Pull(ctx, strings.TrimPrefix(tampered.URL, "http://")+"/test/img:1", tampered.Client()); err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("Pull of a tampered layer = %v, want a digest mismatch", err)
	}
	// A port nothing listens on: this machine's case, no registry reachable.
	l := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(l.URL, "http://")
	l.Close()
	if _, err := openStore(t).Pull(ctx, addr+"/test/img:1", nil); !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), "import an OCI tarball") {
		t.Errorf("Pull from nowhere = %v, want ErrPull saying to import a tarball", err)
	}
	good := registryServer(t, false)
	if _, err := openStore(t).Pull(ctx, strings.TrimPrefix(good.URL, "http://")+"/test/img:2", good.Client()); !errors.Is(err, ErrPull) {
		t.Errorf("Pull of a missing tag = %v, want ErrPull", err)
	}
}
