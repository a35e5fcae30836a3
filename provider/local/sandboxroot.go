package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ttyGID is group tty inside.
const ttyGID = 5

// rootOwner makes a tmpfs belong to the sandbox's root.
var rootOwner = fmt.Sprintf(",uid=%d,gid=%d", hostID(0), hostID(0))

// setupRoot builds the sandbox's root under cfg.Dir/root and pivots into it: the
// image's layers under the sandbox's upper layer, or the host's system directories
// read-only with a /etc of its own (rootfs.go); then the sandbox's writable
// directories, /dev, /proc, /sys and the spec's mounts. userns is the sandbox's user
// namespace, whose mapping shifts the host's (and the image's) root-owned files to
// the sandbox's root.
func setupRoot(cfg initConfig, userns int) error {
	r := filepath.Join(cfg.Dir, dirRoot)
	stage := filepath.Join(cfg.Dir, dirStage)
	for _, d := range []string{r, stage} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("tmpfs", stage, "tmpfs", 0, "mode=0700"); err != nil {
		return fmt.Errorf("stage tmpfs: %w", err)
	}
	var err error
	if len(cfg.Layers) > 0 {
		err = imageRoot(cfg, r, stage, userns)
	} else {
		err = systemRoot(cfg, r, userns)
	}
	if err != nil {
		return err
	}
	if err := writableDirs(cfg, r, stage); err != nil {
		return err
	}
	if err := setupDev(filepath.Join(r, "dev")); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	if err := setupProc(r); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	if err := unix.Mount("sysfs", filepath.Join(r, "sys"), "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		if err := bindReadOnly("/sys", filepath.Join(r, "sys"), true); err != nil {
			return fmt.Errorf("/sys: %w", err)
		}
	}
	for _, b := range cfg.Binds {
		fi, err := os.Stat(b.Source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", b.Target, err)
		}
		if err := ensureMountpoint(r, stage, b.Target, fi.IsDir()); err != nil {
			return fmt.Errorf("mount %s: %w", b.Target, err)
		}
		// Id-mapped: host files keep their owner as seen from the sandbox (the
		// host's root is its root), never setuid, never a device. Not a host
		// directory the sandbox may write: through an id-mapped mount root inside
		// would write files of the host's root there (a setuid one, for a host
		// user to run), so it is bound as it is and the sandbox writes what its
		// own ids (rules.HostIDBase…) may.
		attr := uint64(unix.MOUNT_ATTR_NODEV | unix.MOUNT_ATTR_NOSUID)
		mount := idmapMount
		if b.ReadOnly {
			attr |= unix.MOUNT_ATTR_RDONLY
		} else if b.Host {
			mount = plainMount
		}
		if err := mount(b.Source, filepath.Join(r, b.Target), userns, attr); err != nil {
			return fmt.Errorf("mount %s: %w", b.Target, err)
		}
	}
	for _, h := range cfg.Hide {
		dst := filepath.Join(r, h)
		if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
			if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY, "size=4k,mode=0755"); err != nil {
				return fmt.Errorf("hide %s: %w", h, err)
			}
		}
	}
	readOnly := []string{filepath.Join(r, "dev")}
	if len(cfg.Layers) == 0 {
		readOnly = append(readOnly, r, filepath.Join(r, "home"))
	}
	for _, d := range readOnly {
		if err := setReadOnly(d, false); err != nil {
			return fmt.Errorf("read-only %s: %w", d, err)
		}
	}
	if err := os.Chdir(r); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return os.Chdir("/")
}

// privateProc makes init's mount namespace private and mounts the sandbox's procfs on
// /proc: Go writes a child's uid_map under /proc/<pid>, a pid of this namespace.
func privateProc() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	return nil
}

// bindReadOnly bind-mounts src on dst (recursively when rec) and makes it read-only.
func bindReadOnly(src, dst string, rec bool) error {
	flags := uintptr(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return setReadOnly(dst, rec)
}

func setReadOnly(path string, rec bool) error {
	var flags uint
	if rec {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, path, flags, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
}

// ensureMountpoint creates target (a directory or an empty file) inside the root r.
// Where its parent is read-only host land, the nearest existing ancestor gets a
// tmpfs-backed overlay first, so nothing is ever created on the host.
func ensureMountpoint(r, stage, target string, dir bool) error {
	p := filepath.Join(r, target)
	if _, err := os.Lstat(p); err == nil {
		return nil
	}
	anc := filepath.Dir(p)
	for {
		if _, err := os.Stat(anc); err == nil {
			break
		}
		anc = filepath.Dir(anc)
	}
	create := func() error {
		if dir {
			return os.MkdirAll(p, 0o755)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, nil, 0o644)
	}
	err := create()
	if err == nil || !errors.Is(err, syscall.EROFS) {
		return err
	}
	up, err := os.MkdirTemp(stage, "up-")
	if err != nil {
		return err
	}
	// The merged directory takes the upper one's mode and owner: the lower one's.
	if fi, err := os.Stat(anc); err == nil {
		_ = os.Chmod(up, fi.Mode().Perm())
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			_ = os.Chown(up, int(st.Uid), int(st.Gid))
		}
	}
	work, err := os.MkdirTemp(stage, "work-")
	if err != nil {
		return err
	}
	opts := "lowerdir=" + anc + ",upperdir=" + up + ",workdir=" + work
	if err := unix.Mount("overlay", anc, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay on %s: %w", strings.TrimPrefix(anc, r), err)
	}
	return create()
}

// setupDev makes a minimal /dev: the harmless character devices bound from the host,
// a private devpts and a /dev/shm.
func setupDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID, "mode=0755"+rootOwner); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		dst := filepath.Join(dev, n)
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid="+strconv.Itoa(hostID(ttyGID))); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	shm := fmt.Sprintf("mode=1777,size=%d%s", rules.DefaultShmBytes, rootOwner)
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, shm); err != nil {
		return err
	}
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// setupProc mounts the sandbox's own /proc with the kernel-wide knobs read-only and
// the kernel's memory and keys masked, as container runtimes do.
func setupProc(r string) error {
	proc := filepath.Join(r, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, n := range []string{"sys", "sysrq-trigger", "irq", "bus", "fs"} {
		p := filepath.Join(proc, n)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := bindReadOnly(p, p, true); err != nil {
			return err
		}
	}
	for _, n := range []string{"kcore", "keys", "timer_list", "sched_debug", "kallsyms"} {
		p := filepath.Join(proc, n)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount(filepath.Join(r, "dev/null"), p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
