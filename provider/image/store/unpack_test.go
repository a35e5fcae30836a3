package store

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// entry is one tar entry of a test layer.
type entry struct {
	name, body, link string
	typ              byte
	pax              map[string]string
}

func layerTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link, PAXRecords: e.pax, Format: tar.FormatPAX}
		if typ == tar.TypeDir {
			hdr.Mode = 0o755
		}
		if typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func requireRoot(t testing.TB) {
	if os.Geteuid() != 0 {
		t.Skip("whiteouts are character devices: mknod needs root")
	}
}

func isWhiteout(p string) bool {
	var st unix.Stat_t
	return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func TestUnpackLayer(t *testing.T) {
	requireRoot(t)
	dir := filepath.Join(t.TempDir(), "layer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := layerTar(t,
		entry{name: "./etc/", typ: tar.TypeDir},
		entry{name: "etc/hostname", body: "box\n"},
		entry{name: "etc/.wh.motd"},
		entry{name: "var/cache/.wh..wh..opq"},
		entry{name: "bin", typ: tar.TypeSymlink, link: "/usr/bin"},
		entry{name: "etc/hosts", typ: tar.TypeLink, link: "etc/hostname"},
		entry{name: "etc/xattr", body: "x", pax: map[string]string{"SCHILY.xattr.trusted.overlay.redirect": "/etc", "SCHILY.xattr.user.k": "v"}},
		entry{name: "etc/hostname2", body: "old"},
		entry{name: "etc/hostname2", body: "new"},
	)
	if err := unpackLayer(bytes.NewReader(data), dir); err != nil {
		t.Fatalf("unpackLayer: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc/hosts")); err != nil || string(b) != "box\n" {
		t.Errorf("hard link etc/hosts = %q, %v", b, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "etc/hostname2")); string(b) != "new" {
		t.Errorf("a repeated entry = %q, want the later one", b)
	}
	if !isWhiteout(filepath.Join(dir, "etc/motd")) {
		t.Errorf("etc/.wh.motd did not become a 0/0 character device")
	}
	if v, err := lgetxattr(filepath.Join(dir, "var/cache"), opaqueXattr); err != nil || v != "y" {
		t.Errorf("var/cache opaque xattr = %q, %v, want y", v, err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "bin")); err != nil || l != "/usr/bin" {
		t.Errorf("symlink bin = %q, %v", l, err)
	}
	if _, err := lgetxattr(filepath.Join(dir, "etc/xattr"), "trusted.overlay.redirect"); err == nil {
		t.Errorf("a trusted.overlay xattr from the tar was applied")
	}
	if v, err := lgetxattr(filepath.Join(dir, "etc/xattr"), "user.k"); err != nil || v != "v" {
		t.Errorf("user xattr = %q, %v", v, err)
	}
}

func TestUnpackRejectsEscapes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
	}{
		{"absolute", []entry{{name: "/etc/passwd", body: "x"}}},
		{"dotdot", []entry{{name: "../outside", body: "x"}}},
		{"inner dotdot", []entry{{name: "a/../../outside", body: "x"}}},
		{"through symlink", []entry{{name: "l", typ: tar.TypeSymlink, link: ".."}, {name: "l/outside", body: "x"}}},
		{"through absolute symlink", []entry{{name: "l", typ: tar.TypeSymlink, link: "/tmp"}, {name: "l/outside", body: "x"}}},
		{"whiteout through symlink", []entry{{name: "l", typ: tar.TypeSymlink, link: ".."}, {name: "l/.wh.outside"}}},
		{"hard link dotdot", []entry{{name: "h", typ: tar.TypeLink, link: "../outside"}}},
		{"hard link absolute", []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}},
		{"hard link through symlink", []entry{{name: "l", typ: tar.TypeSymlink, link: "/etc"}, {name: "h", typ: tar.TypeLink, link: "l/passwd"}}},
		{"hard link to missing", []entry{{name: "h", typ: tar.TypeLink, link: "nothing"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "layer")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			err := unpackLayer(bytes.NewReader(layerTar(t, tc.entries...)), dir)
			if !errors.Is(err, ErrUnsafeEntry) {
				t.Errorf("unpackLayer = %v, want ErrUnsafeEntry", err)
			}
			if ents, _ := os.ReadDir(root); len(ents) != 1 {
				t.Errorf("unpackLayer wrote next to the layer: %v", ents)
			}
		})
	}
}

func TestPackUnpackRoundTrip(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "a/b"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a/b/f"), []byte("data"), 0o640))
	must(os.Link(filepath.Join(src, "a/b/f"), filepath.Join(src, "a/hard")))
	must(os.Symlink("b/f", filepath.Join(src, "a/sym")))
	must(unix.Mknod(filepath.Join(src, "gone"), unix.S_IFCHR, 0))
	must(os.Mkdir(filepath.Join(src, "opaque"), 0o755))
	must(unix.Setxattr(filepath.Join(src, "opaque"), opaqueXattr, []byte("y"), 0))
	ln, err := net.Listen("unix", filepath.Join(src, "a/sock"))
	must(err)
	defer ln.Close()
	var buf bytes.Buffer
	must(packLayer(src, &buf, nil, nil))
	dst := filepath.Join(t.TempDir(), "l")
	must(os.Mkdir(dst, 0o755))
	must(unpackLayer(&buf, dst))
	if b, err := os.ReadFile(filepath.Join(dst, "a/hard")); err != nil || string(b) != "data" {
		t.Errorf("a/hard = %q, %v", b, err)
	}
	var st1, st2 unix.Stat_t
	must(unix.Lstat(filepath.Join(dst, "a/hard"), &st1))
	must(unix.Lstat(filepath.Join(dst, "a/b/f"), &st2))
	if st1.Ino != st2.Ino || st2.Mode&0o777 != 0o640 {
		t.Errorf("hard link lost (inodes %d, %d) or mode %o", st1.Ino, st2.Ino, st2.Mode&0o777)
	}
	if l, _ := os.Readlink(filepath.Join(dst, "a/sym")); l != "b/f" {
		t.Errorf("a/sym -> %q", l)
	}
	if !isWhiteout(filepath.Join(dst, "gone")) {
		t.Errorf("whiteout did not survive pack and unpack")
	}
	if v, _ := lgetxattr(filepath.Join(dst, "opaque"), opaqueXattr); v != "y" {
		t.Errorf("opaque dir lost its xattr")
	}
	if _, err := os.Lstat(filepath.Join(dst, "a/sock")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a socket was packed: %v", err)
	}
}

// FuzzUnpackLayer: whatever the tar, nothing is written outside the layer's folder.
func FuzzUnpackLayer(f *testing.F) {
	f.Add(layerTar(f, entry{name: "a/b", body: "x"}, entry{name: "a/.wh.c"}, entry{name: "a/.wh..wh..opq"}))
	f.Add(layerTar(f, entry{name: "l", typ: tar.TypeSymlink, link: ".."}, entry{name: "l/x", body: "x"}))
	f.Add(layerTar(f, entry{name: "h", typ: tar.TypeLink, link: "../x"}))
	f.Add(layerTar(f, entry{name: "d", typ: tar.TypeDir}, entry{name: "d", body: "file over dir"}, entry{name: "d/x", body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "layer")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = unpackLayer(bytes.NewReader(data), dir)
		ents, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != 1 || ents[0].Name() != "layer" {
			t.Fatalf("unpackLayer wrote outside the layer: %v", ents)
		}
		if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
			t.Fatalf("the layer folder was replaced: %v", err)
		}
	})
}

func TestPackSkip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "boot/dir"), 0o755)
	os.WriteFile(filepath.Join(src, "boot/dir/new"), []byte("n"), 0o644)
	os.WriteFile(filepath.Join(src, "boot/mountpoint"), nil, 0o644)
	var buf bytes.Buffer
	skip := func(rel string, st *syscall.Stat_t) bool {
		return rel == "boot" || rel == "boot/mountpoint" || rel == "boot/dir"
	}
	if err := packLayer(src, &buf, nil, skip); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(&buf)
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	if got := strings.Join(names, " "); got != "boot/dir/new" {
		t.Errorf("packed %q, want only boot/dir/new", got)
	}
}
