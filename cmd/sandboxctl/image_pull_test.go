package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
)

// TestImagePullPlainProgress pulls a two-layer image from a registry on loopback
// (go-containerregistry's own, in memory) with stderr not a terminal: the id goes to
// stdout, and stderr has one plain line per layer begun and ended, no bar. A second
// pull finds the layers stored.
func TestImagePullPlainProgress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the image store unpacks layers with their owners: needs root")
	}
	ref := imagetest.Registry(t, "test/pull:1", 4096, 2)
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
