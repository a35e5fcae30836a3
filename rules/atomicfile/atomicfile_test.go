package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f.json")
	for _, content := range []string{"one", "two, longer"} {
		if err := WriteFile(name, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(name)
		if err != nil || string(b) != content {
			t.Errorf("read back %q, %v; want %q", b, err, content)
		}
		if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o640 {
			t.Errorf("mode = %v, want 0640", fi.Mode().Perm())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %d entries, want only the file (no temp files left)", len(ents))
	}
}

func TestWriteFileFailureLeavesOldContent(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "f")
	if err := WriteFile(name, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory in the way of the rename: the write must fail and clean up.
	target := filepath.Join(dir, "sub")
	os.MkdirAll(filepath.Join(target, "x"), 0o755)
	if err := WriteFile(target, []byte("new"), 0o600); err == nil {
		t.Errorf("WriteFile over a non-empty directory = nil, want an error")
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), nil, 0o600); err == nil {
		t.Errorf("WriteFile into a missing folder = nil, want an error")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("folder holds %v, want f and sub only", ents)
	}
	if b, _ := os.ReadFile(name); string(b) != "old" {
		t.Errorf("f = %q, want old", b)
	}
}
