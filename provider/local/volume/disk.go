package volume

// A sandbox's disk: everything it can write to (its home, /tmp, /var/tmp, /run and,
// from an image, the overlay's upper layer) is on a file system of its own, an ext4
// image of Limits.DiskBytes, sparse on the host and loop-mounted by the engine at
// <sandbox>/disk. A write past it gets ENOSPC inside; the host's disk holds at most
// the image's size. Each size's freshly made file system is kept as a template in
// <data dir>/disks, so a create copies its few allocated blocks instead of running
// mkfs.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

const (
	// DiskDir is the mount point of a sandbox's file system, in its sandbox directory.
	DiskDir = "disk"
	// DiskImage is that file system's image, in the sandbox directory.
	DiskImage = "disk.img"
	// MinDiskBytes is the smallest disk: ext4 needs room for its own structures.
	MinDiskBytes = 16 << 20
)

// Disks makes sandboxes' disks from the templates kept in one directory.
type Disks struct {
	dir string
	mu  sync.Mutex // one template made at a time
}

// NewDisks keeps its templates in dir (<data dir>/disks), made on first use.
func NewDisks(dir string) *Disks { return &Disks{dir: dir} }

// Make creates the sandbox directory sd's file system of size bytes and mounts it at
// sd/DiskDir. Its errors wrap engine.ErrLimit: the disk limit cannot be applied.
func (d *Disks) Make(sd string, size int64) error {
	if size < MinDiskBytes {
		return fmt.Errorf("disk of %d bytes: at least %d: %w", size, MinDiskBytes, engine.ErrLimit)
	}
	tmpl, err := d.template(size)
	if err != nil {
		return fmt.Errorf("disk: %w: %w", engine.ErrLimit, err)
	}
	img := filepath.Join(sd, DiskImage)
	if err := copySparse(tmpl, img); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	mnt := filepath.Join(sd, DiskDir)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	// noinit_itable: the kernel never zeroes the lazy inode tables, so the image stays
	// sparse.
	if err := loopMount(img, mnt, unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, "noinit_itable"); err != nil {
		return fmt.Errorf("disk: %w: %w", engine.ErrLimit, err)
	}
	return nil
}

// template returns the path of an empty file system of size bytes, making it once.
func (d *Disks) template(size int64) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := filepath.Join(d.dir, strconv.FormatInt(size, 10)+".img")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(d.dir, filepath.Base(p)+".tmp-")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return "", err
	}
	// No journal (a sandbox's disk dies with it), no room to grow online (its
	// reserved descriptor blocks are most of a fresh image: 4 MiB of 4.2), lazy
	// tables, the root directory the sandbox root's.
	owner := strconv.Itoa(rules.HostIDBase)
	err = runTool(context.Background(), "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner="+owner+":"+owner, tmp)
	if err != nil {
		return "", err
	}
	return p, os.Rename(tmp, p)
}

// copySparse copies src's data extents to a new file dst of the same size.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(fi.Size()); err != nil {
		return err
	}
	ifd := int(in.Fd())
	for off := int64(0); off < fi.Size(); {
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if _, err := in.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := out.Seek(data, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.CopyN(out, in, hole-data); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// UnmountDisk detaches the sandbox directory sd's disk, if mounted.
func UnmountDisk(sd string) {
	mnt := filepath.Join(sd, DiskDir)
	for range 50 {
		err := unix.Unmount(mnt, unix.MNT_DETACH)
		if err == nil || err == unix.EINVAL || err == unix.ENOENT {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
