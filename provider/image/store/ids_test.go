package store

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// setuidTar is a layer with a setuid-root program, a setgid-root one, a file of
// the sandbox's user and one of an id no sandbox maps.
func setuidTar(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/bin/su", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 2},
		{Name: "usr/bin/wall", Typeflag: tar.TypeReg, Mode: 0o2755, Gid: 5, Size: 2},
		{Name: "home/user/notes", Typeflag: tar.TypeReg, Mode: 0o644, Uid: rules.UserID, Gid: rules.UserID, Size: 2},
		{Name: "odd", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 70000, Gid: 70000, Size: 2},
	} {
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("#!"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// noSetuidOfHostRoot fails for every file under dir that is setuid or setgid and
// owned by the host's root (uid or gid 0).
func noSetuidOfHostRoot(t *testing.T, dir string) (files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files++
		st := info.Sys().(*syscall.Stat_t)
		if st.Mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 && (st.Uid == 0 || st.Gid == 0) {
			t.Errorf("%s is mode %o, owned by %d:%d on the host: a setuid program of the host's root", p, st.Mode&0o7777, st.Uid, st.Gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

func owner(t *testing.T, p string) (uid, gid uint32, mode uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid, st.Mode & 0o7777
}

// Issue 31, finding 4: image layers kept setuid bits owned by host uid 0. They are
// now owned by the sandboxes' host ids, setuid bits kept (root's inside).
func TestImportedLayerHasNoSetuidOfHostRoot(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	ids, err := s.Import(ctx, bytes.NewReader(ociArchive(t, "suid:1", Config{}, setuidTar(t))), "")
	if err != nil {
		t.Fatal(err)
	}
	if n := noSetuidOfHostRoot(t, s.Dir()); n < 10 {
		t.Fatalf("walked %d files of the store, want the layer's among them", n)
	}
	fs, err := s.ResolveImage(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	base := uint32(rules.HostIDBase)
	for _, tc := range []struct {
		path     string
		uid, gid uint32
		mode     uint32
	}{
		{"", base, base, 0o755},
		{"usr/bin/su", base, base, 0o4755},
		{"usr/bin/wall", base, base + 5, 0o2755},
		{"home", base, base, 0o755}, // made for its entry, not in the tar
		{"home/user/notes", base + rules.UserID, base + rules.UserID, 0o644},
		{"odd", base + 65534, base + 65534, 0o4755},
	} {
		uid, gid, mode := owner(t, filepath.Join(fs.Layers[0], tc.path))
		if uid != tc.uid || gid != tc.gid || mode != tc.mode {
			t.Errorf("layer file %q = %d:%d mode %o, want %d:%d mode %o", tc.path, uid, gid, mode, tc.uid, tc.gid, tc.mode)
		}
	}
}

// Issue 31, finding 4: a snapshot committed a sandbox-made setuid file as uid 0,
// mode 4755. Root inside (host id rules.HostIDBase) made it; it stays that id.
func TestCommitImageKeepsSandboxSetuidOffHostRoot(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	parent, err := s.Import(ctx, bytes.NewReader(ociArchive(t, "base:1", Config{}, setuidTar(t))), "")
	if err != nil {
		t.Fatal(err)
	}
	upper := t.TempDir()
	sh := filepath.Join(upper, "rootshell")
	if err := os.WriteFile(sh, []byte("#!"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(sh, rules.HostIDBase, rules.HostIDBase); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sh, 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	id, err := s.CommitImage(ctx, parent[0], upper, rules.HostIDBase, rules.IDCount)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := s.ResolveImage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	uid, gid, mode := owner(t, filepath.Join(fs.Layers[len(fs.Layers)-1], "rootshell"))
	if uid != rules.HostIDBase || gid != rules.HostIDBase || mode != 0o4755 {
		t.Errorf("committed rootshell = %d:%d mode %o, want %d:%d mode 4755", uid, gid, mode, rules.HostIDBase, rules.HostIDBase)
	}
	noSetuidOfHostRoot(t, s.Dir())
}

// Issue 31, finding 4: a store opened in an existing 0755 data dir stayed readable
// by anyone. Open makes the store's dir 0700, and a data dir it creates too.
func TestOpenMakesStorePrivate(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(data, "images")
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "new-data", "images")
	for _, dir := range []string{existing, fresh} {
		if _, err := Open(Options{Dir: dir}); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{dir, filepath.Join(dir, layersDir), filepath.Join(dir, "oci")} {
			if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
				t.Errorf("after Open(%s): %s is %v; want 0700", dir, d, modeOf(st, err))
			}
		}
	}
	if st, err := os.Stat(filepath.Dir(fresh)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("a data dir Open created is %v; want 0700", modeOf(st, err))
	}
}

// A store of an older version has its layers, owned by the host's root, in layers/:
// they are never booted; the image's layers are unpacked again from their blobs, owned
// by the sandboxes' ids, and images still build on them.
func TestOldStoreLayersUnpackedAgain(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t)
	ids, err := s.Import(ctx, bytes.NewReader(ociArchive(t, "old:1", Config{}, setuidTar(t))), "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := s.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	// Make it the older version's store: the layer in layers/, owned by root.
	diff := strings.TrimPrefix(in.Layers[0], "sha256:")
	oldDir := filepath.Join(s.Dir(), oldLayersDir)
	if err := os.Mkdir(oldDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", ".json"} {
		if err := os.Rename(filepath.Join(s.Dir(), layersDir, diff+suffix), filepath.Join(oldDir, diff+suffix)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(oldDir, diff, "usr/bin/su"), 0, 0); err != nil {
		t.Fatal(err)
	}
	fs, err := s.ResolveImage(ctx, "old:1")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(s.Dir(), layersDir, diff); fs.Layers[0] != want {
		t.Errorf("ResolveImage layer = %s, want %s", fs.Layers[0], want)
	}
	if uid, _, mode := owner(t, filepath.Join(fs.Layers[0], "usr/bin/su")); uid != rules.HostIDBase || mode != 0o4755 {
		t.Errorf("usr/bin/su unpacked again = uid %d mode %o, want %d, 4755", uid, mode, rules.HostIDBase)
	}
	if _, err := s.NewImage(ctx, ImageSpec{Parent: "old:1", Config: Config{WorkingDir: "/w"}}); err != nil {
		t.Errorf("NewImage on the old store's image: %v", err)
	}
	noSetuidOfHostRoot(t, filepath.Join(s.Dir(), layersDir))
}

func modeOf(st os.FileInfo, err error) any {
	if err != nil {
		return err
	}
	return st.Mode().Perm()
}
