package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestImagePullPlainProgress pulls a two-layer image from a registry on loopback
// (go-containerregistry's own, in memory) with stderr not a terminal: the id goes to
// stdout, and stderr has one plain line per layer begun and ended, no bar. A second
// pull finds the layers stored.
func TestImagePullPlainProgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the image store unpacks layers with their owners: needs root")
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref := strings.TrimPrefix(srv.URL, "http://") + "/test/pull:1"
	img, err := random.Image(4096, 2)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push the test image: %v", err)
	}
	data := t.TempDir()
	getenv := func(k string) string {
		if k == "SANDBOXCTL_DATA_DIR" {
			return data
		}
		return os.Getenv(k)
	}
	layer := `layer [12]/2 [0-9a-f]{12}: `
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"first", []string{
			`^pulling ` + regexp.QuoteMeta(ref) + `$`,
			`: manifest [0-9a-f]{12}, 2 layers, \d+\.\d kB$`,
			`^` + layer + `\d+\.\d kB, downloading$`,
			`^` + layer + `\d+\.\d kB, downloaded in \S+$`,
			`^` + layer + `\d+\.\d kB, downloading$`,
			`^` + layer + `\d+\.\d kB, downloaded in \S+$`,
			`: unpacking 2 layers$`,
			`: pulled [0-9a-f]{12} in \S+$`,
		}},
		{"again", []string{
			`^pulling `,
			`: manifest `,
			`^` + layer + `\d+\.\d kB, already stored$`,
			`^` + layer + `\d+\.\d kB, already stored$`,
			`: unpacking 2 layers$`,
			`: pulled `,
		}},
	} {
		var stdout, stderr strings.Builder
		if code := run(t.Context(), []string{"image", "pull", ref}, getenv, strings.NewReader(""), &stdout, &stderr); code != 0 {
			t.Fatalf("%s: sandboxctl image pull = %d, stderr:\n%s", tc.name, code, stderr.String())
		}
		if !regexp.MustCompile(`^[0-9a-f]{64}\n$`).MatchString(stdout.String()) {
			t.Errorf("%s: stdout %q, want the image id alone", tc.name, stdout.String())
		}
		if strings.ContainsAny(stderr.String(), "\r\x1b") {
			t.Errorf("%s: stderr %q holds terminal controls", tc.name, stderr.String())
		}
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if len(lines) != len(tc.want) {
			t.Fatalf("%s: stderr has %d lines, want %d:\n%s", tc.name, len(lines), len(tc.want), stderr.String())
		}
		for i, re := range tc.want {
			if !regexp.MustCompile(re).MatchString(lines[i]) {
				t.Errorf("%s: stderr line %d = %q, want it to match %s", tc.name, i+1, lines[i], re)
			}
		}
	}
}
