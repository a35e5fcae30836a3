package main

import (
	"os"
	"path/filepath"
	"testing"
)

// Issue 31, finding 4: `image import` into an existing 0755 data dir left the store
// readable by anyone. The first image command makes the data dir and its store 0700.
func TestImageCommandMakesDataDirPrivate(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	getenv := func(string) string { return "" }
	if _, errOut, code := runCLI(t, getenv, "", "--data-dir", dataDir, "image", "list"); code != 0 {
		t.Fatalf("image list = %d: %s", code, errOut)
	}
	for _, d := range []string{dataDir, imageStoreDir(dataDir)} {
		if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
			t.Errorf("after image list: %s is %v, %v; want 0700", d, st.Mode().Perm(), err)
		}
	}
}
