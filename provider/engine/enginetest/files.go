package enginetest

import (
	"errors"
	"io/fs"
	"slices"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// testFiles: write (parents made, mode kept), read, stat, list, mkdir and remove, and
// what an exec sees of them.
func (s *suite) testFiles(t *testing.T) {
	in := s.create(t, engine.Spec{})
	id, c := in.ID, ctx(t)
	dir := home("files/a/b")
	data := []byte("hello\x00world\n")
	if err := s.e.WriteFile(c, id, dir+"/f.bin", data, 0o640); err != nil {
		t.Fatalf("WriteFile with missing parents: %v", err)
	}
	if got, err := s.e.ReadFile(c, id, dir+"/f.bin"); err != nil || string(got) != string(data) {
		t.Errorf("ReadFile = %q, %v, want %q", got, err, data)
	}
	if out := s.sh(t, id, "cat "+dir+"/f.bin | od -An -c | tr -d ' \\n'"); out != `hello\0world\n` {
		t.Errorf("the file seen by an exec = %q", out)
	}
	fi, err := s.e.Stat(c, id, dir+"/f.bin")
	if err != nil || fi.Name != "f.bin" || fi.Size != int64(len(data)) || fi.IsDir || fs.FileMode(fi.Mode).Perm() != 0o640 {
		t.Errorf("Stat = %+v, %v, want f.bin, %d bytes, mode 0640", fi, err, len(data))
	}
	if err := s.e.WriteFile(c, id, dir+"/f.bin", []byte("short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := s.e.ReadFile(c, id, dir+"/f.bin"); err != nil || string(got) != "short" {
		t.Errorf("ReadFile after overwrite = %q, %v", got, err)
	}
	if err := s.e.WriteFile(c, id, dir+"/empty", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.e.MkdirAll(c, id, dir+"/sub/deeper"); err != nil {
		t.Fatalf("MkdirAll: %v", err)
	}
	if err := s.e.MkdirAll(c, id, dir+"/sub"); err != nil {
		t.Errorf("MkdirAll of an existing directory: %v", err)
	}
	if fi, err := s.e.Stat(c, id, dir+"/sub"); err != nil || !fi.IsDir || !fs.FileMode(fi.Mode).IsDir() {
		t.Errorf("Stat(dir) = %+v, %v, want a directory", fi, err)
	}
	list, err := s.e.ListFiles(c, id, dir)
	if err != nil {
		t.Fatalf("ListFiles: %v", err)
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Name)
		if want := f.Name == "sub"; f.IsDir != want {
			t.Errorf("ListFiles entry %+v: IsDir = %v", f, f.IsDir)
		}
		if f.Name == "f.bin" && f.Size != 5 || f.Name == "empty" && f.Size != 0 {
			t.Errorf("ListFiles entry %+v: wrong size", f)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"empty", "f.bin", "sub"}) {
		t.Errorf("ListFiles names = %v, want empty, f.bin, sub", names)
	}
	s.sh(t, id, "echo by-exec > "+dir+"/sub/from-exec")
	if got, err := s.e.ReadFile(c, id, dir+"/sub/from-exec"); err != nil || string(got) != "by-exec\n" {
		t.Errorf("ReadFile of a file an exec wrote = %q, %v", got, err)
	}
	if err := s.e.Remove(c, id, dir+"/f.bin"); err != nil {
		t.Errorf("Remove(file): %v", err)
	}
	if _, err := s.e.Stat(c, id, dir+"/f.bin"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat after Remove = %v, want fs.ErrNotExist", err)
	}
	// Remove takes a directory with everything in it.
	if err := s.e.Remove(c, id, dir+"/sub"); err != nil {
		t.Errorf("Remove(non-empty dir): %v", err)
	}
	if _, err := s.e.Stat(c, id, dir+"/sub/deeper"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat under a removed directory = %v, want fs.ErrNotExist", err)
	}
}

// testFileErrors: a missing path is fs.ErrNotExist for every call; a directory where a
// file is needed is ErrIsDir, and a file where a directory is needed ErrNotDir (with
// Capabilities.FileErrors; an error all the same without).
func (s *suite) testFileErrors(t *testing.T) {
	in := s.create(t, engine.Spec{})
	id, c := in.ID, ctx(t)
	missing := home("no/such/path")
	notExist := map[string]error{}
	_, notExist["ReadFile"] = s.e.ReadFile(c, id, missing)
	_, notExist["Stat"] = s.e.Stat(c, id, missing)
	_, notExist["ListFiles"] = s.e.ListFiles(c, id, missing)
	notExist["Remove"] = s.e.Remove(c, id, missing)
	for call, err := range notExist {
		if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, engine.ErrNotFound) {
			t.Errorf("%s(missing path) = %v, want fs.ErrNotExist (and not the sandbox's ErrNotFound)", call, err)
		}
	}
	file, dir := home("errs/file"), home("errs/dir")
	if err := s.e.WriteFile(c, id, file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.e.MkdirAll(c, id, dir); err != nil {
		t.Fatal(err)
	}
	_, isDir1 := s.e.ReadFile(c, id, dir)
	isDir2 := s.e.WriteFile(c, id, dir, []byte("x"), 0o644)
	_, notDir1 := s.e.ListFiles(c, id, file)
	notDir2 := s.e.WriteFile(c, id, file+"/under", []byte("x"), 0o644)
	notDir3 := s.e.MkdirAll(c, id, file+"/sub")
	for _, ck := range []struct {
		call string
		err  error
		want error
	}{
		{"ReadFile(dir)", isDir1, engine.ErrIsDir},
		{"WriteFile(dir)", isDir2, engine.ErrIsDir},
		{"ListFiles(file)", notDir1, engine.ErrNotDir},
		{"WriteFile under a file", notDir2, engine.ErrNotDir},
		{"MkdirAll under a file", notDir3, engine.ErrNotDir},
	} {
		switch {
		case ck.err == nil:
			t.Errorf("%s succeeded, want %v", ck.call, ck.want)
		case s.e.Capabilities().FileErrors && !errors.Is(ck.err, ck.want):
			t.Errorf("%s = %v, want %v", ck.call, ck.err, ck.want)
		}
	}
	if got, err := s.e.ReadFile(c, id, file); err != nil || string(got) != "x" {
		t.Errorf("the file after the failed calls = %q, %v", got, err)
	}
}
