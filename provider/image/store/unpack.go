package store

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// OCI whiteouts (in a layer tar) and their overlayfs form (in an unpacked layer dir).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// ErrUnsafeEntry is matched (errors.Is) by the error for a tar entry that would write
// outside the layer: an absolute or ".." path, a path through a symlink, or a hard link
// to outside the layer.
var ErrUnsafeEntry = errors.New("unsafe layer entry")

// entryPath checks a tar entry's name and returns it clean and relative ("" for the
// layer's root).
func entryPath(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: %q", ErrUnsafeEntry, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q", ErrUnsafeEntry, name)
		}
	}
	p := path.Clean(name)
	if p == "." {
		return "", nil
	}
	return p, nil
}

// unpacker writes one layer's tar into dir in overlayfs form. It never follows a
// symlink it finds in dir: every parent of an entry must be a real directory.
//
// Files are owned by the sandbox's host ids (LayerID): the layer's root is host id
// rules.HostIDBase, root inside a sandbox and nobody on the host. A setuid-root
// program of an image is setuid to an unprivileged host id, so a copy of the
// store run on the host gains nothing; a user-namespaced sandbox sees it as root's.
type unpacker struct {
	dir string
	// chown is false when not running as root (tests as a user): ownership is dropped.
	chown bool
	dirs  []dirTime
}

// LayerID is the host id that id, a uid or gid of an image's layer, is stored as:
// ids 0 … rules.IDCount-1 are shifted into the sandboxes' host range; any other id
// (which no sandbox maps) is the range's nobody (65534).
func LayerID(id int) int {
	if id < 0 || id >= rules.IDCount {
		id = nobodyID
	}
	return rules.HostIDBase + id
}

// nobodyID is the overflow id inside a sandbox.
const nobodyID = 65534

type dirTime struct {
	path string
	mod  time.Time
}

// unpackLayer unpacks the uncompressed layer tar r into the empty folder dir,
// converting OCI whiteouts into overlayfs whiteouts (a 0/0 character device, the
// trusted.overlay.opaque=y xattr).
func unpackLayer(r io.Reader, dir string) error {
	u := &unpacker{dir: dir, chown: os.Geteuid() == 0}
	if u.chown {
		if err := os.Lchown(dir, LayerID(0), LayerID(0)); err != nil {
			return err
		}
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return err
		}
	}
	// Directory times last: writing their entries changed them.
	for i := len(u.dirs) - 1; i >= 0; i-- {
		_ = os.Chtimes(u.dirs[i].path, u.dirs[i].mod, u.dirs[i].mod)
	}
	return nil
}

// parent makes sure every folder above rel exists as a real directory and returns
// rel's host path.
func (u *unpacker) parent(rel string) (string, error) {
	cur := u.dir
	dir := path.Dir(rel)
	if dir == "." {
		return filepath.Join(u.dir, rel), nil
	}
	for _, part := range strings.Split(dir, "/") {
		cur = filepath.Join(cur, part)
		st, err := os.Lstat(cur)
		switch {
		case os.IsNotExist(err):
			if err := os.Mkdir(cur, 0o755); err != nil {
				return "", err
			}
			if u.chown {
				if err := os.Lchown(cur, LayerID(0), LayerID(0)); err != nil {
					return "", err
				}
			}
		case err != nil:
			return "", err
		case !st.IsDir():
			return "", fmt.Errorf("%w: %q goes through %s, which is not a directory", ErrUnsafeEntry, rel, part)
		}
	}
	return filepath.Join(u.dir, rel), nil
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	rel, err := entryPath(hdr.Name)
	if err != nil || rel == "" {
		return err
	}
	dst, err := u.parent(rel)
	if err != nil {
		return err
	}
	base := path.Base(rel)
	if base == whiteoutOpaque {
		return unix.Setxattr(filepath.Dir(dst), opaqueXattr, []byte("y"), 0)
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		target := filepath.Join(filepath.Dir(dst), strings.TrimPrefix(base, whiteoutPrefix))
		if err := os.RemoveAll(target); err != nil {
			return err
		}
		return unix.Mknod(target, unix.S_IFCHR, 0)
	}
	// A later entry replaces an earlier one, except a directory over a directory.
	if st, err := os.Lstat(dst); err == nil && !(st.IsDir() && hdr.Typeflag == tar.TypeDir) {
		if err := os.RemoveAll(dst); err != nil {
			return err
		}
	}
	mode := uint32(hdr.Mode & 0o7777)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(dst, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		u.dirs = append(u.dirs, dirTime{dst, hdr.ModTime})
	case tar.TypeReg:
		if err := writeFile(dst, r); err != nil {
			return err
		}
	case tar.TypeSymlink:
		// Symlinks are stored as they are: inside the sandbox they resolve within its
		// root, and this unpacker never follows them.
		if err := os.Symlink(hdr.Linkname, dst); err != nil {
			return err
		}
	case tar.TypeLink:
		target, err := entryPath(hdr.Linkname)
		if err != nil || target == "" {
			return fmt.Errorf("%w: hard link %q to %q", ErrUnsafeEntry, hdr.Name, hdr.Linkname)
		}
		src, err := u.parent(target)
		if err != nil {
			return err
		}
		if st, err := os.Lstat(src); err != nil || st.IsDir() {
			return fmt.Errorf("%w: hard link %q to %q, which is not a file of this layer", ErrUnsafeEntry, hdr.Name, hdr.Linkname)
		}
		return os.Link(src, dst)
	case tar.TypeChar, tar.TypeFifo:
		kind := uint32(unix.S_IFIFO)
		if hdr.Typeflag == tar.TypeChar {
			kind = unix.S_IFCHR
		}
		if err := unix.Mknod(dst, kind|mode, int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))); err != nil {
			return fmt.Errorf("mknod %s: %w", rel, err)
		}
	default:
		// Block devices and anything else are left out: a sandbox gets no block device
		// from an image.
		return nil
	}
	return u.attrs(dst, hdr, mode)
}

// attrs sets owner, mode, xattrs and times; symlinks get owner and times only.
func (u *unpacker) attrs(dst string, hdr *tar.Header, mode uint32) error {
	if u.chown {
		if err := os.Lchown(dst, LayerID(hdr.Uid), LayerID(hdr.Gid)); err != nil {
			return err
		}
	}
	if hdr.Typeflag == tar.TypeSymlink {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	}
	// chmod after chown: chown clears setuid bits.
	if err := unix.Chmod(dst, mode); err != nil {
		return err
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		// Only user and capability xattrs: trusted.* (overlay's own) and security
		// labels from an image are not applied.
		if !ok || !(strings.HasPrefix(name, "user.") || name == "security.capability") {
			continue
		}
		if err := unix.Lsetxattr(dst, name, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("xattr %s on %s: %w", name, hdr.Name, err)
		}
	}
	if hdr.Typeflag != tar.TypeDir {
		_ = os.Chtimes(dst, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

func writeFile(dst string, r io.Reader) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return f.Close()
}
