package store

import (
	"archive/tar"
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// TestPackLayerSkipsSockets: a sandbox's upper layer with a live server's socket (Caddy's
// admin socket) packs without it, as a tar cannot hold one; the files beside it stay.
func TestPackLayerSkipsSockets(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(dir, "admin.sock"))
	if err != nil {
		t.Skipf("unix sockets: %v", err)
	}
	defer l.Close()
	var buf bytes.Buffer
	if err := packLayer(dir, &buf, nil, nil); err != nil {
		t.Fatalf("packLayer with a socket: %v", err)
	}
	var names []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) != 1 || names[0] != "f" {
		t.Errorf("packed %q, want only f", names)
	}
}
