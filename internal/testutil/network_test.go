package testutil

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReach(t *testing.T) {
	status := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(srv.Close)
		return srv.URL + "/debian/"
	}
	// A listener that accepts and never answers: a host behind a black hole.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	closed := "http://127.0.0.1:" + strconv.Itoa(FreePort(t)) + "/"
	tests := []struct {
		name string
		url  string
		want string // in the error; "" for none
	}{
		{"answers 200", status(http.StatusOK), ""},
		{"answers 404", status(http.StatusNotFound), ""},
		{"answers 503", status(http.StatusServiceUnavailable), "answered 503 Service Unavailable"},
		{"nothing listens", closed, strings.TrimPrefix(strings.TrimSuffix(closed, "/"), "http://") + " is unreachable"},
		{"no answer", "http://" + silent.Addr().String() + "/", silent.Addr().String() + " did not answer within 500ms"},
		{"not a URL", "registry.npmjs.org", "not a URL with a host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			err := Reach(t.Context(), tt.url, 500*time.Millisecond)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Reach(%q) took %v, want it bounded by its timeout", tt.url, took)
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Reach(%q) = %v, want nil", tt.url, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Reach(%q) = %v, want an error with %q", tt.url, err, tt.want)
			}
		})
	}
}

// npmFor returns npm, with its registry set to registry for the test.
func npmFor(t *testing.T, registry string) string {
	t.Helper()
	npm := NeedCommand(t, "npm", "the npm test cache")
	t.Setenv("npm_config_registry", registry)
	t.Setenv("npm_config_cache", t.TempDir())
	t.Setenv("HTTP_PROXY", "") // npm would send even a loopback registry through a proxy
	t.Setenv("HTTPS_PROXY", "")
	return npm
}

func TestNPMPackagesUnreachableRegistry(t *testing.T) {
	registry := "http://127.0.0.1:" + strconv.Itoa(FreePort(t)) + "/"
	npm := npmFor(t, registry)
	dir := filepath.Join(t.TempDir(), "pkgs")
	_, err := npmPackages(t.Context(), npm, dir, "node_modules/x/package.json", []string{"x@1.0.0"})
	host := strings.TrimSuffix(strings.TrimPrefix(registry, "http://"), "/")
	if err == nil || !strings.Contains(err.Error(), "npm install x@1.0.0 needs the npm registry: "+host+" is unreachable") {
		t.Fatalf("npmPackages with registry %s = %v, want an error naming the registry's host", registry, err)
	}
}

func TestNPMPackagesInstallsOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }))
	t.Cleanup(srv.Close)
	npm := npmFor(t, srv.URL+"/")
	src := filepath.Join(t.TempDir(), "tiny")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "package.json"), []byte(`{"name":"tiny","version":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cache", "tiny")
	want := filepath.Join(dir, "node_modules", "tiny", "package.json")
	for i, npm := range []string{npm, "/nonexistent/npm"} {
		// The second call finds the package installed and runs no npm at all.
		got, err := npmPackages(t.Context(), npm, dir, "node_modules/tiny/package.json", []string{"file:" + src})
		if err != nil || got != want {
			t.Fatalf("npmPackages, call %d = %q, %v; want %q", i+1, got, err, want)
		}
	}
}

// The npm test cache is keyed by the specs: a new version installs afresh.
func TestNPMCacheDir(t *testing.T) {
	a := npmCacheDir("/c", "deno", []string{"deno@2.9.6"})
	if again := npmCacheDir("/c", "deno", []string{"deno@2.9.6"}); again != a {
		t.Errorf("npmCacheDir of the same specs = %q, then %q; want one folder", a, again)
	}
	if !strings.HasPrefix(a, "/c/sandbox-mcp-test/deno-") {
		t.Errorf("npmCacheDir = %q, want a folder /c/sandbox-mcp-test/deno-<hash>", a)
	}
	for _, specs := range [][]string{{"deno@2.9.7"}, {"deno@2.9.6", "x@1"}, nil} {
		if other := npmCacheDir("/c", "deno", specs); other == a {
			t.Errorf("npmCacheDir(%q) = %q, the folder of [deno@2.9.6] too", specs, other)
		}
	}
}
