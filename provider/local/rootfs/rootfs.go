// Package rootfs builds the root filesystem of a local engine's sandbox, in the mount
// namespace of its shim, for the OCI runtime to pivot into. Package local, the engine,
// is its one importer: its shim calls Build, and its engine lays out the sandbox
// directory by the Dir* names.
//
// With an image (Spec.Image), an overlay: the image's layers read-only under the
// sandbox's own upper layer (DirUpper, the engine's UpperDir). Without
// one, the host's system directories (/usr and the merged-usr links) read-only and a
// /etc made for the sandbox: its users, hosts and resolver, and read-only the few host
// entries programs need (certificates, the loader's cache, time zones, alternatives,
// PAM). Nothing else of the host is there: not its /etc, /root, /home, /opt, /srv,
// /var, nor any data dir. Root-owned host and image files are mounted id-mapped
// (mount_setattr MOUNT_ATTR_IDMAP with the sandbox's user namespace), so inside they
// belong to the sandbox's root and setuid programs such as sudo work.
package rootfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// systemDirs are the host's directories of a sandbox without an image.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcFromHost are the entries of the host's /etc a sandbox without an image sees
// (read-only): what programs need to run, nothing that names the host's users,
// secrets or services, and nothing that configures the host's own sessions
// (gitconfig, environment, profile.d).
var etcFromHost = []string{
	"alternatives", "ssl", "ca-certificates", "ca-certificates.conf", "ld.so.cache", "ld.so.conf",
	"ld.so.conf.d", "localtime", "timezone", "protocols", "services", "rpc", "ethertypes", "mime.types",
	"terminfo", "inputrc", "bash.bashrc", "profile", "shells", "login.defs",
	"pam.d", "pam.conf", "security", "sudo.conf", "host.conf", "gai.conf", "magic",
	"magic.mime", "debian_version", "os-release", "lsb-release", "skel", "xdg", "perl", "python3",
	"vim", "nanorc", "mke2fs.conf", "subuid", "subgid", "adduser.conf", "deluser.conf", "bindresvport.blacklist",
}

// systemRoot makes r a read-only tmpfs with the host's system directories and a /etc
// of the sandbox's own.
func systemRoot(cfg Config, r string, userns int) error {
	if err := unix.Mount("tmpfs", r, "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755"+rootOwner); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	for _, name := range systemDirs {
		if err := mirrorEntry("/"+name, filepath.Join(r, name), userns); err != nil {
			return err
		}
	}
	etc := filepath.Join(r, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	if err := os.Chown(etc, hostRoot, hostRoot); err != nil {
		return err
	}
	for _, name := range etcFromHost {
		if err := mirrorEntry("/etc/"+name, filepath.Join(etc, name), userns); err != nil {
			return err
		}
	}
	if err := writeEtc(etc, cfg.ID, false); err != nil {
		return err
	}
	for _, d := range []string{"proc", "sys", "dev", "home", "tmp", "run", "var", "var/tmp", "root", "mnt", "opt", "srv"} {
		if err := os.Mkdir(filepath.Join(r, d), 0o755); err != nil {
			return err
		}
		if err := os.Chown(filepath.Join(r, d), hostRoot, hostRoot); err != nil {
			return err
		}
	}
	return os.Chmod(filepath.Join(r, "root"), 0o700)
}

// mirrorEntry makes dst what src is, when src exists: the same symlink, or src
// mounted read-only (and id-mapped when its file system allows).
func mirrorEntry(src, dst string, userns int) error {
	fi, err := os.Lstat(src)
	switch {
	case err != nil:
		return nil
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
		return os.Lchown(dst, hostRoot, hostRoot)
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
	default:
		return nil
	}
	return idmapBind(src, dst, userns, true)
}

// idmapBind mounts src on dst with the sandbox's id mapping: a file the host's root
// owns belongs to the sandbox's root. A file system that cannot be id-mapped is bound
// as it is.
func idmapBind(src, dst string, userns int, readOnly bool) error {
	attr := uint64(unix.MOUNT_ATTR_NODEV)
	if readOnly {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	return idmapMount(src, dst, userns, attr)
}

// idmapMount is idmapBind with the mount attributes attr.
func idmapMount(src, dst string, userns int, attr uint64) error {
	set := unix.MOUNT_ATTR_IDMAP | attr
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("clone %s: %w", src, err)
	}
	defer unix.Close(fd)
	err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: set, Userns_fd: uint64(userns)})
	if err != nil {
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s: %w", src, err)
		}
		return unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr})
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount %s: %w", src, err)
	}
	return nil
}

// plainMount binds src on dst with the mount attributes attr, ids as they are.
func plainMount(src, dst string, _ int, attr uint64) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return unix.MountSetattr(unix.AT_FDCWD, dst, unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attr})
}

// writeEtc writes the sandbox's own users, groups, host name, hosts and resolver into
// etc; keep leaves an image's users and groups as they are.
func writeEtc(etc, id string, keep bool) error {
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil || len(resolv) > 64<<10 {
		resolv = nil
	}
	u := strconv.Itoa(rules.UserID)
	files := []struct {
		name, data string
		mode       os.FileMode
	}{
		{"hostname", id + "\n", 0o644},
		{"hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + id + "\n", 0o644},
		{"resolv.conf", string(resolv), 0o644},
	}
	if !keep {
		files = append(files, []struct {
			name, data string
			mode       os.FileMode
		}{
			{"passwd", "root:x:0:0:root:/root:/bin/bash\n" + rules.UserName + ":x:" + u + ":" + u + "::" + rules.HomeDir + ":/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", 0o644},
			{"group", "root:x:0:\ntty:x:5:\nsudo:x:27:" + rules.UserName + "\nshadow:x:42:\n" + rules.UserName + ":x:" + u + ":\nnogroup:x:65534:\n", 0o644},
			{"shadow", "root:*:19000:0:99999:7:::\n" + rules.UserName + ":*:19000:0:99999:7:::\n", 0o640},
			{"nsswitch.conf", "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\nethers: files\nrpc: files\n", 0o644},
			{"sudoers", "Defaults env_reset\nroot ALL=(ALL:ALL) ALL\n" + rules.UserName + " ALL=(ALL) NOPASSWD:ALL\n", 0o440},
		}...)
	}
	for _, f := range files {
		p := filepath.Join(etc, f.name)
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			return err
		}
		if err := os.Chown(p, hostRoot, hostRoot); err != nil {
			return err
		}
	}
	return nil
}

// imageRoot mounts the image's layers read-only (their files are owned by the sandboxes' host
// ids already: the store unpacks them so), under the sandbox's
// upper layer on r.
func imageRoot(cfg Config, r, stage string, userns int) error {
	names := make([]string, len(cfg.Layers))
	for i, l := range cfg.Layers {
		names[len(cfg.Layers)-1-i] = "l" + strconv.Itoa(i) // the overlay wants the top first
		dst := filepath.Join(stage, "l"+strconv.Itoa(i))
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
		if err := plainMount(l, dst, userns, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NODEV); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	// Relative lower dirs keep the options within a page, whatever the layer count.
	wd, _ := os.Getwd()
	if err := os.Chdir(stage); err != nil {
		return err
	}
	opts := "lowerdir=" + strings.Join(names, ":") + ",upperdir=" + filepath.Join(cfg.Dir, DirUpper) +
		",workdir=" + filepath.Join(cfg.Dir, DirWork)
	err := unix.Mount("overlay", r, "overlay", unix.MS_NODEV, opts)
	_ = os.Chdir(wd)
	if err != nil {
		return fmt.Errorf("overlay root: %w", err)
	}
	for _, d := range []string{"proc", "sys", "dev", "run", "tmp", "etc", "home"} {
		if err := mkdirOwned(r, filepath.Join(r, d)); err != nil {
			return err
		}
	}
	if err := mkdirOwned(r, filepath.Join(r, rules.HomeDir)); err != nil {
		return err
	}
	// The host name, hosts and resolver are the sandbox's, bound over the image's so
	// they stay out of its upper layer.
	etc := filepath.Join(stage, "etc")
	if err := os.Mkdir(etc, 0o755); err != nil {
		return err
	}
	if err := writeEtc(etc, cfg.ID, true); err != nil {
		return err
	}
	for _, n := range []string{"hostname", "hosts", "resolv.conf"} {
		dst := filepath.Join(r, "etc", n)
		if _, err := ensureMountpoint(r, stage, "/etc/"+n, false); err != nil {
			return err
		}
		if err := bindReadOnly(filepath.Join(etc, n), dst, false); err != nil {
			return err
		}
	}
	return nil
}

// writableDirs mounts the sandbox's own writable directories: /run always, and
// without an image /home/user, /tmp and /var/tmp (an image's are in its overlay).
func writableDirs(cfg Config, r, stage string) error {
	binds := [][2]string{{DirRun, "run"}}
	if len(cfg.Layers) == 0 {
		if err := unix.Mount("tmpfs", filepath.Join(r, "home"), "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755"+rootOwner); err != nil {
			return err
		}
		if err := os.Mkdir(filepath.Join(r, "home/user"), 0o755); err != nil {
			return err
		}
		binds = append(binds, [2]string{DirHome, "home/user"}, [2]string{DirTmp, "tmp"}, [2]string{DirVarTmp, "var/tmp"})
	}
	for _, b := range binds {
		dst := filepath.Join(r, b[1])
		if fi, err := os.Stat(dst); err != nil || !fi.IsDir() {
			if _, err := ensureMountpoint(r, stage, "/"+b[1], true); err != nil {
				return err
			}
		}
		if err := unix.Mount(filepath.Join(cfg.Dir, b[0]), dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b[1], err)
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, dst, 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NODEV}); err != nil {
			return fmt.Errorf("nodev %s: %w", b[1], err)
		}
	}
	return nil
}
