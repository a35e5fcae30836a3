package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/proliferate-ai/sandbox-mcp/provider/progress"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// registryServer serves one image (under an index, behind a Bearer token) like a
// registry; tamper changes a served layer's bytes.
func registryServer(t *testing.T, tamper bool) *httptest.Server {
	blobs, _ := ociBlobs("", Config{Env: []string{"A=1"}}, layerTar(t, entry{name: "etc/pulled", body: "yes"}))
	var manifestDigest digest.Digest
	for d, b := range blobs {
		if strings.Contains(string(b), `"schemaVersion"`) {
			manifestDigest = d
		}
	}
	idx, _ := json.Marshal(ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{
		{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.Digest("sha256:" + strings.Repeat("0", 64)), Size: 1, Platform: &ocispec.Platform{Architecture: "s390x", OS: "linux"}},
		{MediaType: ocispec.MediaTypeImageManifest, Digest: manifestDigest, Size: int64(len(blobs[manifestDigest])), Platform: &ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"}},
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
			w.Header().Set("Content-Type", ocispec.MediaTypeImageIndex)
			w.Write(idx)
		case strings.HasPrefix(p, "manifests/") || strings.HasPrefix(p, "blobs/"):
			b, ok := blobs[digest.Digest(strings.TrimPrefix(strings.TrimPrefix(p, "manifests/"), "blobs/"))]
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
	id, err := s.Pull(ctx, host+"/test/img:1", PullOptions{Transport: srv.Client().Transport})
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
	// A pulled layer is unpacked as an imported one: owned by the sandboxes' host ids,
	// in a store no other host user may enter.
	if uid, gid, _ := owner(t, filepath.Join(fs.Layers[0], "etc/pulled")); uid != rules.HostIDBase || gid != rules.HostIDBase {
		t.Errorf("pulled etc/pulled is owned by %d:%d, want %d:%d", uid, gid, rules.HostIDBase, rules.HostIDBase)
	}
	if st, err := os.Stat(s.Dir()); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("store mode = %v, want 0700", modeOf(st, err))
	}
	if again, err := s.Pull(ctx, host+"/test/img:1", PullOptions{Transport: srv.Client().Transport}); err != nil || again != id {
		t.Errorf("second Pull = %s, %v; want %s", again, err, id)
	}
}

func TestPullFails(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	tampered := registryServer(t, true)
	if _, err := openStore(t).Pull(ctx, strings.TrimPrefix(tampered.URL, "http://")+"/test/img:1", PullOptions{Transport: tampered.Client().Transport}); err == nil || !strings.Contains(err.Error(), "checksum") && !strings.Contains(err.Error(), "digest") {
		t.Errorf("Pull of a tampered layer = %v, want a digest mismatch", err)
	}
	// A port nothing listens on: this machine's case, no registry reachable.
	l := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(l.URL, "http://")
	l.Close()
	if _, err := openStore(t).Pull(ctx, addr+"/test/img:1", PullOptions{}); !errors.Is(err, ErrPull) || !strings.Contains(err.Error(), "import an OCI tarball") {
		t.Errorf("Pull from nowhere = %v, want ErrPull saying to import a tarball", err)
	}
	good := registryServer(t, false)
	if _, err := openStore(t).Pull(ctx, strings.TrimPrefix(good.URL, "http://")+"/test/img:2", PullOptions{Transport: good.Client().Transport}); !errors.Is(err, ErrPull) {
		t.Errorf("Pull of a missing tag = %v, want ErrPull", err)
	}
}

// TestPullProgress: where stderr is not a terminal, a pull tells of its manifest
// and of each layer in plain lines, one per part begun or ended, and no line per
// chunk of bytes.
func TestPullProgress(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	srv := registryServer(t, false)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/test/img:1"
	s := openStore(t)
	hexN := `[0-9a-f]{12}`
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"first", []string{
			`^` + regexp.QuoteMeta(ref) + `: manifest ` + hexN + `, 1 layer, \d+ B$`,
			`^layer 1/1 ` + hexN + `: \d+ B, downloading$`,
			`^layer 1/1 ` + hexN + `: \d+ B, downloaded in \S+$`,
			`^` + regexp.QuoteMeta(ref) + `: unpacking 1 layer$`,
			`^` + regexp.QuoteMeta(ref) + `: pulled ` + hexN + ` in \S+$`,
		}},
		{"again", []string{
			`: manifest ` + hexN + `, 1 layer`,
			`^layer 1/1 ` + hexN + `: \d+ B, already stored$`,
			`: unpacking 1 layer$`,
			`: pulled `,
		}},
	} {
		var out bytes.Buffer
		rep := progress.New(&out, progress.Options{})
		if _, err := s.Pull(ctx, ref, PullOptions{Transport: srv.Client().Transport, Progress: rep}); err != nil {
			t.Fatalf("%s Pull = %v", tc.name, err)
		}
		rep.Done()
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != len(tc.want) {
			t.Fatalf("%s pull printed %q, want %d lines", tc.name, out.String(), len(tc.want))
		}
		for i, re := range tc.want {
			if !regexp.MustCompile(re).MatchString(lines[i]) {
				t.Errorf("%s pull line %d = %q, want it to match %s", tc.name, i+1, lines[i], re)
			}
		}
	}
}

// TestPullByDigest: a reference with a digest pulls that manifest, and a registry
// that answers with another manifest is refused.
func TestPullByDigest(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	srv := registryServer(t, false)
	host := strings.TrimPrefix(srv.URL, "http://")
	s := openStore(t)
	id, err := s.Pull(ctx, host+"/test/img:1", PullOptions{Transport: srv.Client().Transport})
	if err != nil {
		t.Fatalf("Pull = %v", err)
	}
	in, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := s.readIndex()
	if err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index = %+v, %v", idx, err)
	}
	ref := host + "/test/img@" + idx.Manifests[0].Digest.String()
	if got, err := openStore(t).Pull(ctx, ref, PullOptions{Transport: srv.Client().Transport}); err != nil || got != in.ID {
		t.Errorf("Pull(%s) = %s, %v; want %s", ref, got, err, in.ID)
	}
	wrong := host + "/test/img@sha256:" + strings.Repeat("1", 64)
	if _, err := openStore(t).Pull(ctx, wrong, PullOptions{Transport: srv.Client().Transport}); !errors.Is(err, ErrPull) {
		t.Errorf("Pull(%s) = %v, want ErrPull", wrong, err)
	}
}
