package store

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// IDMap translates a file's host uid or gid into the id the layer records (for a layer
// written by a sandbox whose ids are mapped to a host range); nil keeps ids.
type IDMap func(id int) int

// SkipFunc reports whether packLayer leaves out the entry rel (slash-separated,
// relative to the folder) with stat st.
type SkipFunc func(rel string, st *syscall.Stat_t) bool

// packLayer writes the overlayfs-form folder dir as an OCI layer tar to w, in lexical
// order: a 0/0 character device becomes a .wh.<name> whiteout, a directory with
// trusted.overlay.opaque=y gets a .wh..wh..opq entry, hard links within dir become
// link entries, and sockets are left out.
func packLayer(dir string, w io.Writer, ids IDMap, skip SkipFunc) error {
	if ids == nil {
		ids = func(id int) int { return id }
	}
	tw := tar.NewWriter(w)
	links := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat %s: no unix stat", rel)
		}
		if skip != nil && skip(rel, st) {
			return nil
		}
		if info.Mode()&fs.ModeSocket != 0 {
			// A live program's endpoint (Caddy's admin socket in a booted sandbox's
			// upper layer): no layer can hold one, and tar refuses it.
			return nil
		}
		if info.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0 {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: whiteoutName(rel), Mode: 0o600,
				ModTime: info.ModTime(), Format: tar.FormatPAX})
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Format = rel, tar.FormatPAX
		hdr.Uid, hdr.Gid = ids(int(st.Uid)), ids(int(st.Gid))
		hdr.Uname, hdr.Gname = "", ""
		if info.IsDir() {
			hdr.Name += "/"
		}
		if info.Mode().IsRegular() && st.Nlink > 1 {
			if first, ok := links[st.Ino]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				links[st.Ino] = rel
			}
		}
		hdr.PAXRecords = packXattrs(p)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if info.IsDir() {
			if v, err := lgetxattr(p, opaqueXattr); err == nil && v == "y" {
				return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel + "/" + whiteoutOpaque, Mode: 0o600,
					ModTime: info.ModTime(), Format: tar.FormatPAX})
			}
			return nil
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			return copyFile(tw, p)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pack layer: %w", err)
	}
	return tw.Close()
}

func whiteoutName(rel string) string {
	dir, base := filepath.Split(rel)
	return dir + whiteoutPrefix + base
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func lgetxattr(p, name string) (string, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// packXattrs are the user.* and security.capability xattrs of p as PAX records.
func packXattrs(p string) map[string]string {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n == 0 {
		return nil
	}
	var recs map[string]string
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") && name != "security.capability" {
			continue
		}
		if v, err := lgetxattr(p, name); err == nil {
			if recs == nil {
				recs = map[string]string{}
			}
			recs["SCHILY.xattr."+name] = v
		}
	}
	return recs
}
