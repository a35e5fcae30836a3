package store

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestPackSkipsSockets: a socket in a sandbox's upper layer (a server's admin socket)
// is left out of the layer instead of failing the snapshot; the files beside it stay.
func TestPackSkipsSockets(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Skipf("no unix socket here: %v", err)
	}
	defer ln.Close()
	var buf bytes.Buffer
	if err := packLayer(dir, &buf, nil, nil); err != nil {
		t.Fatalf("packLayer of a folder with a socket = %v", err)
	}
	var names []string
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
	}
	if len(names) != 1 || names[0] != "kept" {
		t.Errorf("layer entries = %q, want only kept", names)
	}
}
