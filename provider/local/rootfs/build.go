package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Names of a sandbox directory's entries that its root is made of.
const (
	DirHome   = "disk/home" // the writable directories are on the sandbox's disk
	DirTmp    = "disk/tmp"
	DirVarTmp = "disk/vartmp"
	DirRun    = "disk/run"
	DirUpper  = "disk/upper" // an image's overlay: its upper layer
	DirWork   = "disk/work"  // and its work directory
	DirStage  = "stage"      // overlay upper dirs of mount points, only used inside
)

// hostRoot is the host id of the sandbox's root (and its group).
const hostRoot = rules.HostIDBase

// rootOwner makes a tmpfs belong to the sandbox's root.
var rootOwner = fmt.Sprintf(",uid=%d,gid=%d", hostRoot, hostRoot)

// Config is what a sandbox's root is built from. The engine sends it to the shim
// inside init's configuration (package local's initConfig); TrustPEM never travels
// in it: the shim sets it from the secrets.
type Config struct {
	// ID is the sandbox's id: its host name.
	ID string `json:"id"`
	// Dir is the sandbox's directory on the host, holding the Dir* entries.
	Dir string `json:"dir"`
	// Layers are the image's layer directories on the host, lowest first; empty
	// means the host's system directories.
	Layers []string `json:"layers,omitempty"`
	// Binds are mounted into the root after its own directories.
	Binds []Bind `json:"binds,omitempty"`
	// Hide are host directories covered with an empty read-only tmpfs (the data dir).
	Hide []string `json:"hide,omitempty"`
	// TrustPEM is a certificate the sandbox trusts besides the system's (the
	// authority of its secrets' proxy), added to its copy of rules.TrustBundleFile.
	TrustPEM []byte `json:"-"`
}

// Bind is a mount of a host file or directory into the root.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Host marks a host directory of Spec.Mounts: read-write, it is bound as it is,
	// never id-mapped (see Build).
	Host bool `json:"host,omitempty"`
}

// Build builds the sandbox's root at r, in the caller's own mount namespace (the
// shim's), for the runtime to pivot into: the image's layers under the sandbox's
// upper layer, or the host's system directories read-only with a /etc of its own
// (rootfs.go here); then the sandbox's writable directories and the spec's mounts. It says
// whether the root itself is to be read-only (the default root). The runtime mounts
// /proc, /dev and /sys. Mounts are id-mapped with a user namespace of the sandbox's
// mapping (the same as the container's), so the host's (and the image's) root-owned
// files belong to the sandbox's root: userns is a descriptor of such a namespace.
func Build(cfg Config, r string, userns int) (bool, error) {
	stage := filepath.Join(cfg.Dir, DirStage)
	for _, d := range []string{r, stage} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return false, err
		}
	}
	// Small and capped: it holds only the overlays' upper directories that make
	// mount points, and the sandbox's /etc files of an image root.
	if err := unix.Mount("tmpfs", stage, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=4m"); err != nil {
		return false, fmt.Errorf("stage tmpfs: %w", err)
	}
	var err error
	if len(cfg.Layers) > 0 {
		err = imageRoot(cfg, r, stage, userns)
	} else {
		err = systemRoot(cfg, r, userns)
	}
	if err != nil {
		return false, err
	}
	if err := writableDirs(cfg, r, stage); err != nil {
		return false, err
	}
	if len(cfg.TrustPEM) > 0 {
		if err := addTrust(r, stage, cfg.TrustPEM); err != nil {
			return false, fmt.Errorf("trust the secrets' authority: %w", err)
		}
	}
	var overlays []string
	for _, b := range cfg.Binds {
		fi, err := os.Stat(b.Source)
		if err != nil {
			return false, fmt.Errorf("mount %s: %w", b.Target, err)
		}
		anc, err := ensureMountpoint(r, stage, b.Target, fi.IsDir())
		if err != nil {
			return false, fmt.Errorf("mount %s: %w", b.Target, err)
		}
		if anc != "" {
			overlays = append(overlays, anc)
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
			return false, fmt.Errorf("mount %s: %w", b.Target, err)
		}
	}
	// An overlay made for a mount point (/usr/local/bin for the bound binaries) is
	// read-only once its mount points exist: nothing is writable outside the disk.
	for _, anc := range overlays {
		if err := setReadOnly(anc, false); err != nil {
			return false, fmt.Errorf("read-only %s: %w", strings.TrimPrefix(anc, r), err)
		}
	}
	for _, h := range cfg.Hide {
		dst := filepath.Join(r, h)
		if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
			if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, "size=4k,mode=0755"); err != nil {
				return false, fmt.Errorf("hide %s: %w", h, err)
			}
		}
	}
	if len(cfg.Layers) == 0 {
		if err := setReadOnly(filepath.Join(r, "home"), false); err != nil {
			return false, fmt.Errorf("read-only /home: %w", err)
		}
		return true, nil
	}
	return false, nil
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
func ensureMountpoint(r, stage, target string, dir bool) (string, error) {
	p := filepath.Join(r, target)
	if _, err := os.Lstat(p); err == nil {
		return "", nil
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
		return "", err
	}
	up, err := os.MkdirTemp(stage, "up-")
	if err != nil {
		return "", err
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
		return "", err
	}
	opts := "lowerdir=" + anc + ",upperdir=" + up + ",workdir=" + work
	if err := unix.Mount("overlay", anc, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("overlay on %s: %w", strings.TrimPrefix(anc, r), err)
	}
	return anc, create()
}

// addTrust binds, read-only over the root's rules.TrustBundleFile, the root's bundle (if any)
// with pem appended.
func addTrust(r, stage string, pem []byte) error {
	dst := filepath.Join(r, rules.TrustBundleFile)
	old, err := os.ReadFile(dst)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if len(old) > 0 && old[len(old)-1] != '\n' {
		old = append(old, '\n')
	}
	tmp := filepath.Join(stage, "ca-certificates.crt")
	if err := os.WriteFile(tmp, append(old, pem...), 0o644); err != nil {
		return err
	}
	if _, err := ensureMountpoint(r, stage, rules.TrustBundleFile, false); err != nil {
		return err
	}
	return bindReadOnly(tmp, dst, false)
}

// mkdirOwned creates p and its missing parents below base, each owned by the owner of
// its parent.
func mkdirOwned(base, p string) error {
	if p == base || len(p) <= len(base) {
		return nil
	}
	if _, err := os.Lstat(p); err == nil {
		return nil
	}
	parent := filepath.Dir(p)
	if err := mkdirOwned(base, parent); err != nil {
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(parent, &st); err != nil {
		return err
	}
	if st.Uid >= rules.HostIDBase && st.Uid < rules.HostIDBase+rules.IDCount {
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	}
	return nil
}
