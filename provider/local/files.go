package local

// File operations on a sandbox from the host: every path is resolved with openat2 and
// RESOLVE_IN_ROOT against the sandbox's root (its init's /proc/<pid>/root), so a
// symlink or ".." inside can never lead out of the sandbox.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// maxReadFile bounds ReadFile.
const maxReadFile = 1 << 30

// rootFd opens the sandbox's root directory and says whether the sandbox is isolated.
func (e *Engine) rootFd(id string) (int, bool, error) {
	_, st, err := e.running(id)
	if err != nil {
		return -1, false, err
	}
	root := "/"
	if st.Isolated {
		root = "/proc/" + strconv.Itoa(st.Pid) + "/root"
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, false, fmt.Errorf("sandbox %s root: %w", id, err)
	}
	// The pid could have been reused between the check and the open.
	if st.Isolated && !st.InitAlive() {
		unix.Close(fd)
		return -1, false, fmt.Errorf("sandbox %q is dead: %w", id, engine.ErrNotFound)
	}
	return fd, st.Isolated, nil
}

func cleanPath(p string) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("path %q is not absolute", p)
	}
	return path.Clean(p), nil
}

func openIn(root int, p string, flags int, mode uint32) (*os.File, error) {
	fd, err := unix.Openat2(root, p, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode),
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	for err == unix.EINTR || err == unix.EAGAIN {
		fd, err = unix.Openat2(root, p, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode),
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// withRoot runs f with the sandbox's root and a cleaned absolute path, as the
// sandbox's root when the sandbox is isolated (asSandboxRoot).
func (e *Engine) withRoot(id, p string, f func(root int, p string) error) error {
	p, err := cleanPath(p)
	if err != nil {
		return err
	}
	root, isolated, err := e.rootFd(id)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	if !isolated {
		return fileErr(f(root, p))
	}
	return fileErr(asSandboxRoot(func() error { return f(root, p) }))
}

// sentinelErr is an error that is also one of engine's file sentinels; its text is
// the error's alone.
type sentinelErr struct{ err, sentinel error }

func (s sentinelErr) Error() string   { return s.err.Error() }
func (s sentinelErr) Unwrap() []error { return []error{s.err, s.sentinel} }

// fileErr makes EISDIR engine.ErrIsDir and ENOTDIR engine.ErrNotDir (ENOENT is
// fs.ErrNotExist already).
func fileErr(err error) error {
	switch {
	case errors.Is(err, unix.EISDIR):
		return sentinelErr{err, engine.ErrIsDir}
	case errors.Is(err, unix.ENOTDIR):
		return sentinelErr{err, engine.ErrNotDir}
	case errors.Is(err, unix.ENOTEMPTY):
		return sentinelErr{err, engine.ErrNotEmpty}
	}
	return err
}

// asSandboxRoot runs f on an OS thread of its own whose filesystem ids are the
// sandbox's root (hostID(0)) while it keeps the engine's capabilities. What it creates
// belongs to the sandbox as if its root had made it, and id-mapped mounts (volumes,
// binds), where the host's root has no id and the kernel refuses its writes with
// EOVERFLOW, take its writes. The thread stays locked, so the runtime ends it with the
// goroutine instead of handing its changed ids to other code.
func asSandboxRoot(f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- func() error {
			if err := unix.Setfsgid(hostID(0)); err != nil {
				return err
			}
			if err := unix.Setfsuid(hostID(0)); err != nil {
				return err
			}
			// A non-zero fsuid takes the file capabilities out of the effective set:
			// put the permitted set back.
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capget(&hdr, &data[0]); err != nil {
				return fmt.Errorf("capget: %w", err)
			}
			data[0].Effective, data[1].Effective = data[0].Permitted, data[1].Permitted
			if err := unix.Capset(&hdr, &data[0]); err != nil {
				return fmt.Errorf("capset: %w", err)
			}
			return f()
		}()
	}()
	return <-done
}

// ReadFile reads a regular file of the sandbox.
func (e *Engine) ReadFile(ctx context.Context, id, p string) ([]byte, error) {
	var data []byte
	err := e.withRoot(id, p, func(root int, p string) error {
		f, err := openIn(root, p, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return &fs.PathError{Op: "read", Path: p, Err: unix.EISDIR}
		}
		if !fi.Mode().IsRegular() {
			return &fs.PathError{Op: "read", Path: p, Err: errors.New("not a regular file")}
		}
		data, err = io.ReadAll(io.LimitReader(f, maxReadFile))
		return err
	})
	return data, err
}

// WriteFile writes data to a file of the sandbox through a temporary file and a
// rename, creating parent directories.
func (e *Engine) WriteFile(ctx context.Context, id, p string, data []byte, mode uint32) error {
	if mode == 0 {
		mode = 0o644
	}
	return e.withRoot(id, p, func(root int, p string) error {
		if p == "/" {
			return &fs.PathError{Op: "write", Path: p, Err: unix.EISDIR}
		}
		if err := mkdirAllIn(root, path.Dir(p)); err != nil {
			return err
		}
		dir, err := openIn(root, path.Dir(p), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer dir.Close()
		dfd := int(dir.Fd())
		tmp := "." + path.Base(p) + ".tmp-" + newEngineID("")
		fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode&0o7777)
		if err != nil {
			return &fs.PathError{Op: "write", Path: p, Err: err}
		}
		f := os.NewFile(uintptr(fd), tmp)
		inheritOwner(dfd, tmp)
		_, werr := f.Write(data)
		if werr == nil {
			werr = unix.Fchmod(fd, mode&0o7777)
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = unix.Renameat(dfd, tmp, dfd, path.Base(p))
		}
		if werr != nil {
			_ = unix.Unlinkat(dfd, tmp, 0)
			return &fs.PathError{Op: "write", Path: p, Err: werr}
		}
		return nil
	})
}

// mkdirAllIn creates p and its parents inside root.
func mkdirAllIn(root int, p string) error {
	if p == "/" {
		return nil
	}
	if f, err := openIn(root, p, unix.O_PATH|unix.O_DIRECTORY, 0); err == nil {
		f.Close()
		return nil
	}
	if err := mkdirAllIn(root, path.Dir(p)); err != nil {
		return err
	}
	parent, err := openIn(root, path.Dir(p), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer parent.Close()
	if err := unix.Mkdirat(int(parent.Fd()), path.Base(p), 0o755); err != nil {
		if err == unix.EEXIST {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: p, Err: err}
	}
	inheritOwner(int(parent.Fd()), path.Base(p))
	return nil
}

// inheritOwner gives name in dirfd the owner of dirfd when that is an id of the
// sandbox's range: what the engine writes (as the host's root) belongs to the
// sandbox's user of that directory, never to a host id it could not change.
func inheritOwner(dirfd int, name string) {
	var st unix.Stat_t
	if unix.Fstat(dirfd, &st) != nil || !inSandboxRange(st.Uid) || !inSandboxRange(st.Gid) {
		return
	}
	_ = unix.Fchownat(dirfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW)
}

// MkdirAll creates a directory and its parents.
func (e *Engine) MkdirAll(ctx context.Context, id, p string) error {
	return e.withRoot(id, p, func(root int, p string) error { return mkdirAllIn(root, p) })
}

func fileInfo(p string, fi fs.FileInfo) engine.FileInfo {
	return engine.FileInfo{Name: fi.Name(), Path: p, Size: fi.Size(), Mode: uint32(fi.Mode()),
		IsDir: fi.IsDir(), ModTime: fi.ModTime().UTC()}
}

// Stat describes a path (symlinks followed, inside the sandbox).
func (e *Engine) Stat(ctx context.Context, id, p string) (engine.FileInfo, error) {
	var out engine.FileInfo
	err := e.withRoot(id, p, func(root int, p string) error {
		f, err := openIn(root, p, unix.O_PATH, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		out = fileInfo(p, fi)
		out.Name = path.Base(p)
		return nil
	})
	return out, err
}

// ListFiles lists a directory's entries, sorted by name; symlinks are not followed.
func (e *Engine) ListFiles(ctx context.Context, id, dir string) ([]engine.FileInfo, error) {
	var out []engine.FileInfo
	err := e.withRoot(id, dir, func(root int, dir string) error {
		f, err := openIn(root, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return err
		}
		out = make([]engine.FileInfo, 0, len(names))
		for _, n := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(int(f.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue
			}
			out = append(out, statInfo(path.Join(dir, n), n, &st))
		}
		return nil
	})
	sortInfos(out)
	return out, err
}

func sortInfos(s []engine.FileInfo) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].Name < s[j-1].Name; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func statInfo(p, name string, st *unix.Stat_t) engine.FileInfo {
	mode := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return engine.FileInfo{Name: name, Path: p, Size: st.Size, Mode: uint32(mode), IsDir: mode.IsDir(),
		ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
}

// Remove deletes a path and, for a directory, everything under it (symlinks are
// removed, never followed). A missing path is an error wrapping fs.ErrNotExist.
func (e *Engine) Remove(ctx context.Context, id, p string) error {
	return e.withRoot(id, p, func(root int, p string) error {
		if p == "/" {
			return &fs.PathError{Op: "remove", Path: p, Err: unix.EBUSY}
		}
		parent, err := openIn(root, path.Dir(p), unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer parent.Close()
		var st unix.Stat_t
		if err := unix.Fstatat(int(parent.Fd()), path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "remove", Path: p, Err: err}
		}
		if err := removeAllAt(int(parent.Fd()), path.Base(p)); err != nil {
			return &fs.PathError{Op: "remove", Path: p, Err: err}
		}
		return nil
	})
}

// removeAllAt removes name in dirfd recursively without following symlinks.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	for {
		names, rerr := d.Readdirnames(256)
		for _, n := range names {
			if err := removeAllAt(fd, n); err != nil {
				d.Close()
				return err
			}
		}
		if rerr != nil || len(names) == 0 {
			break
		}
	}
	d.Close()
	err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
	if err == unix.ENOENT {
		return nil
	}
	return err
}
