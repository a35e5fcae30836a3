package volume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// attachLoop binds img to a free loop device. With autoclear the device frees itself
// when its last mount goes (or, never mounted, when its last descriptor is closed), so
// nothing tracks loop numbers. The caller closes the returned device once it has
// mounted it.
func attachLoop(img string, readOnly bool) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("loop devices: %w", err)
	}
	defer ctl.Close()
	backing, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer backing.Close()
	for range 20 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("loop devices: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		cfg := unix.LoopConfig{Fd: uint32(backing.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if readOnly {
			cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
		}
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure %s: %w", dev.Name(), err)
		}
		// Another process took the device between GET_FREE and CONFIGURE: try again.
		time.Sleep(time.Millisecond)
	}
	return nil, errors.New("loop devices: none stayed free: retry when fewer sandboxes are being created")
}

// loopMount attaches img to a free loop device and mounts its ext4 on mnt with flags
// and data; the device goes with the mount.
func loopMount(img, mnt string, flags uintptr, data string) error {
	dev, err := attachLoop(img, false)
	if err != nil {
		return err
	}
	// Once mounted, the mount holds the device; closing the last descriptor of an
	// unmounted one detaches it (autoclear).
	defer dev.Close()
	if err := unix.Mount(dev.Name(), mnt, "ext4", flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", dev.Name(), mnt, err)
	}
	return nil
}

// LoopsBacking names the loop devices ("loop3") whose backing file is img.
func LoopsBacking(img string) []string {
	var out []string
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, d := range devs {
		if b, err := os.ReadFile(d); err == nil && strings.TrimSpace(string(b)) == img {
			out = append(out, strings.Split(d, "/")[3])
		}
	}
	return out
}

// IsMountPoint reports whether p is mounted on: its device differs from its parent's.
func IsMountPoint(p string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(p, &st) != nil || syscall.Lstat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// unmountAll detaches every mount stacked on mnt.
func unmountAll(mnt string) {
	for IsMountPoint(mnt) {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			return
		}
	}
}

// runTool runs one of e2fsprogs' tools.
func runTool(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return fmt.Errorf("%s is not installed (Debian package e2fsprogs): %w", name, engine.ErrUnsupported)
		}
		return fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Usable reports whether this machine can make and mount volumes and disks: loop
// devices and mkfs.ext4/tune2fs.
func Usable() bool {
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return false
	}
	for _, t := range []string{"mkfs.ext4", "tune2fs"} {
		if _, err := exec.LookPath(t); err != nil {
			return false
		}
	}
	return true
}
