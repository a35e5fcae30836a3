package local

// The sandbox's disk: everything it can write to (its home, /tmp, /var/tmp, /run and,
// from an image, the overlay's upper layer) is on a file system of its own, an ext4
// image of Limits.DiskBytes, sparse on the host and loop-mounted by the engine at
// <sandbox>/disk. A write past it gets ENOSPC inside; the host's disk holds at most
// the image's size. Each size's freshly made file system is kept as a template in
// <data dir>/disks, so a create copies its few allocated blocks instead of running
// mkfs.

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

const (
	dirDisk  = "disk"     // the mount point of the sandbox's file system
	fileDisk = "disk.img" // its image
	// minDiskBytes is the smallest disk: ext4 needs room for its own structures.
	minDiskBytes = 16 << 20
)

var diskTemplateMu sync.Mutex

// makeDisk creates the sandbox directory sd's file system of size bytes and mounts it
// at sd/disk.
func (e *Engine) makeDisk(sd string, size int64) error {
	if size < minDiskBytes {
		return fmt.Errorf("disk of %d bytes: at least %d: %w", size, minDiskBytes, engine.ErrLimit)
	}
	tmpl, err := e.diskTemplate(size)
	if err != nil {
		return fmt.Errorf("disk: %w: %w", engine.ErrLimit, err)
	}
	img := filepath.Join(sd, fileDisk)
	if err := copySparse(tmpl, img); err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	mnt := filepath.Join(sd, dirDisk)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := loopMount(img, mnt); err != nil {
		return fmt.Errorf("disk: %w: %w", engine.ErrLimit, err)
	}
	return nil
}

// diskTemplate returns the path of an empty file system of size bytes, making it once.
func (e *Engine) diskTemplate(size int64) (string, error) {
	diskTemplateMu.Lock()
	defer diskTemplateMu.Unlock()
	dir := filepath.Join(e.dir, "disks")
	p := filepath.Join(dir, strconv.FormatInt(size, 10)+".img")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp := p + ".tmp-" + newEngineID("")
	defer os.Remove(tmp)
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		return "", err
	}
	if err := os.Truncate(tmp, size); err != nil {
		return "", err
	}
	// No journal (a sandbox's disk dies with it), no room to grow online (its
	// reserved descriptor blocks are most of a fresh image: 4 MiB of 4.2), lazy tables (mount with
	// noinit_itable so the kernel never zeroes them: the image stays sparse), the
	// root directory the sandbox root's.
	owner := strconv.Itoa(hostID(0))
	out, err := exec.Command("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal,^resize_inode",
		"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner="+owner+":"+owner, tmp).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mkfs.ext4: %w: %s", err, out)
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

// loopMount attaches img to a free loop device (detached again when unmounted) and
// mounts its ext4 on mnt.
func loopMount(img, mnt string) error {
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	ctl, err := unix.Open("/dev/loop-control", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ctl)
	for try := 0; ; try++ {
		n, err := unix.IoctlRetInt(ctl, unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lfd, err := unix.Open(dev, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(lfd, &cfg)
		if err == unix.EBUSY && try < 20 {
			unix.Close(lfd) // taken by another create meanwhile
			time.Sleep(time.Millisecond)
			continue
		}
		if err != nil {
			unix.Close(lfd)
			return fmt.Errorf("configure %s: %w", dev, err)
		}
		err = unix.Mount(dev, mnt, "ext4", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOATIME, "noinit_itable")
		// Once mounted, the mount holds the device; closing the last descriptor of an
		// unmounted one detaches it (autoclear).
		unix.Close(lfd)
		if err != nil {
			return fmt.Errorf("mount %s: %w", dev, err)
		}
		return nil
	}
}

// unmountDisk detaches the sandbox directory sd's disk, if mounted.
func unmountDisk(sd string) {
	mnt := filepath.Join(sd, dirDisk)
	for range 50 {
		err := unix.Unmount(mnt, unix.MNT_DETACH)
		if err == nil || err == unix.EINVAL || err == unix.ENOENT {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}
