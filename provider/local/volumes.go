package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// A volume is an ext4 filesystem in a sparse image file (DataDir/volumes/<name>/data.img)
// whose capacity holds for every sandbox: the filesystem is a little larger than the
// capacity and the difference is reserved for the host's root, which no sandbox is
// (user namespaces map sandbox root elsewhere), so the sandbox gets ENOSPC at exactly
// the capacity and the host disk is never written past it. The engine loop-mounts it at
// DataDir/volumes/<name>/mnt (nodev, nosuid) at its first use and keeps it mounted
// until the volume is removed — one superblock for the file, whatever the order in
// which sandboxes' mount namespaces go away (two mounts of one image through two loop
// devices would corrupt it) — and each
// sandbox binds that mount at its target with its id mapping: several sandboxes share
// one mount, so they see each other's writes at once, and a file's owner is the same
// from every sandbox.
const (
	volumeMeta  = "volume.json"
	volumeImage = "data.img"
	volumeMnt   = "mnt"
	// volumeAccessed's mtime is the last access: one utimensat per mount, no rewrite.
	volumeAccessed = "accessed"
)

// volumeRecord is DataDir/volumes/<name>/volume.json.
type volumeRecord struct {
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacityBytes"`
	Created       time.Time         `json:"created"`
	LastAccessed  time.Time         `json:"lastAccessed"`
	Labels        map[string]string `json:"labels,omitempty"`
}

var _ engine.Volumes = (*Engine)(nil)

func (e *Engine) volumesDir() string           { return filepath.Join(e.dir, "volumes") }
func (e *Engine) volumeDir(name string) string { return filepath.Join(e.volumesDir(), name) }

// withVolumesLock runs f holding the data dir's volume lock (flock), so Engines of
// several processes on one data dir never create, mount or remove one volume at once.
func (e *Engine) withVolumesLock(f func() error) error {
	if err := os.MkdirAll(e.volumesDir(), 0o700); err != nil {
		return err
	}
	lf, err := os.OpenFile(filepath.Join(e.volumesDir(), ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	return f()
}

// CreateVolume makes a volume: a sparse image with an ext4 filesystem whose space for
// sandboxes is exactly the capacity.
func (e *Engine) CreateVolume(ctx context.Context, spec engine.VolumeSpec, ifMissing bool) (engine.VolumeInfo, error) {
	if err := rules.ValidateVolumeName(spec.Name); err != nil {
		return engine.VolumeInfo{}, fmt.Errorf("create volume: %w", err)
	}
	capacity := spec.CapacityBytes
	if capacity == 0 {
		capacity = rules.DefaultVolumeBytes
	}
	if capacity < rules.MinVolumeBytes || capacity > rules.MaxVolumeBytes {
		return engine.VolumeInfo{}, fmt.Errorf("create volume %q: capacity %d bytes is outside %d..%d", spec.Name, capacity, int64(rules.MinVolumeBytes), int64(rules.MaxVolumeBytes))
	}
	var rec volumeRecord
	err := e.withVolumesLock(func() error {
		if r, err := e.readVolume(spec.Name); err == nil {
			if !ifMissing {
				return fmt.Errorf("volume %q exists: %w", spec.Name, engine.ErrNameTaken)
			}
			rec = r
			return nil
		}
		now := time.Now().UTC()
		rec = volumeRecord{Name: spec.Name, CapacityBytes: capacity, Created: now, LastAccessed: now, Labels: spec.Labels}
		return e.makeVolume(ctx, rec)
	})
	if err != nil {
		return engine.VolumeInfo{}, fmt.Errorf("create volume: %w", err)
	}
	return e.volumeInfo(rec), nil
}

// makeVolume builds the volume in a temporary directory and renames it into place, so
// a crash never leaves a half-made volume under its name.
func (e *Engine) makeVolume(ctx context.Context, rec volumeRecord) error {
	tmp, err := os.MkdirTemp(e.volumesDir(), ".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := makeVolumeFS(ctx, filepath.Join(tmp, volumeImage), filepath.Join(tmp, volumeMnt), rec.CapacityBytes); err != nil {
		return err
	}
	if err := writeVolume(tmp, rec); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, volumeAccessed), nil, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, e.volumeDir(rec.Name))
}

// makeVolumeFS makes the image: capacity plus room for the filesystem's own metadata,
// then measures what a non-root writer may use and reserves the rest for the host's
// root. A little slack above the capacity pays for the files' own extent blocks, so a
// file of exactly the capacity fits and one megabyte more does not.
func makeVolumeFS(ctx context.Context, img, mnt string, capacity int64) error {
	want := capacity + capacity/256 + 256<<10
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	overhead := max(8<<20, capacity/16)
	for range 4 {
		avail, bsize, err := mkfsVolume(ctx, img, mnt, capacity+overhead)
		if err != nil {
			return err
		}
		if avail >= want {
			// tune2fs -r sets the whole reserve: mkfs reserved none (-m 0).
			return runTool(ctx, "tune2fs", "-r", strconv.FormatInt((avail-want)/bsize, 10), img)
		}
		overhead *= 2
	}
	return fmt.Errorf("volume filesystem: no size gives %d bytes of room", capacity)
}

// mkfsVolume makes a sparse image of size bytes with an ext4 filesystem owned by the
// sandbox user, and reports what statfs offers a non-root writer.
func mkfsVolume(ctx context.Context, img, mnt string, size int64) (avail, bsize int64, err error) {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, 0, err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return 0, 0, err
	}
	uid, gid := volumeOwnerIDs()
	owner := fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,nodiscard", uid, gid)
	if err := runTool(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner, img); err != nil {
		return 0, 0, err
	}
	return measureVolume(img, mnt)
}

// measureVolume mounts the image once to read what statfs offers a non-root writer.
func measureVolume(img, mnt string) (avail, bsize int64, err error) {
	dev, err := attachLoop(img, false)
	if err != nil {
		return 0, 0, err
	}
	defer dev.Close()
	if err := unix.Mount(dev.Name(), mnt, "ext4", unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return 0, 0, fmt.Errorf("mount %s: %w", img, err)
	}
	defer unix.Unmount(mnt, 0)
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, st.Bsize, nil
}

// attachLoop binds img to a free loop device. With autoclear the device frees itself
// when its last mount goes, so the engine never tracks loop numbers.
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
	for range 8 {
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
	}
	return nil, errors.New("loop devices: none stayed free")
}

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

func (e *Engine) readVolume(name string) (volumeRecord, error) {
	var rec volumeRecord
	if rules.ValidateVolumeName(name) != nil {
		return rec, fmt.Errorf("volume %q: %w", name, engine.ErrNotFound)
	}
	b, err := os.ReadFile(filepath.Join(e.volumeDir(name), volumeMeta))
	if errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("volume %q: %w", name, engine.ErrNotFound)
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("volume %q: %w", name, err)
	}
	if st, err := os.Stat(filepath.Join(e.volumeDir(name), volumeAccessed)); err == nil && st.ModTime().After(rec.LastAccessed) {
		rec.LastAccessed = st.ModTime().UTC()
	}
	return rec, nil
}

func writeVolume(dir string, rec volumeRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, volumeMeta), b, 0o600)
}

// GetVolume describes one volume.
func (e *Engine) GetVolume(ctx context.Context, name string) (engine.VolumeInfo, error) {
	rec, err := e.readVolume(name)
	if err != nil {
		return engine.VolumeInfo{}, err
	}
	return e.volumeInfo(rec), nil
}

// ListVolumes describes every volume, by name.
func (e *Engine) ListVolumes(ctx context.Context) ([]engine.VolumeInfo, error) {
	entries, err := os.ReadDir(e.volumesDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	users := e.volumeUsers()
	out := []engine.VolumeInfo{}
	for _, ent := range entries {
		rec, err := e.readVolume(ent.Name())
		if err != nil {
			continue // a temporary directory or a volume being removed
		}
		out = append(out, volumeInfoOf(rec, users[rec.Name]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// RemoveVolume deletes a volume that no live sandbox mounts.
func (e *Engine) RemoveVolume(ctx context.Context, name string) error {
	err := e.withVolumesLock(func() error {
		if _, err := e.readVolume(name); err != nil {
			return err
		}
		if users := e.volumeUsers()[name]; len(users) > 0 {
			return fmt.Errorf("volume %q is mounted by %s: %w", name, strings.Join(users, ", "), engine.ErrInUse)
		}
		dir := e.volumeDir(name)
		unmountVolume(filepath.Join(dir, volumeMnt))
		// Rename first: a crash mid-removal leaves no half volume under the name.
		gone := filepath.Join(e.volumesDir(), ".rm-"+name)
		if err := os.Rename(dir, gone); err != nil {
			return err
		}
		return os.RemoveAll(gone)
	})
	if err != nil {
		return fmt.Errorf("remove volume: %w", err)
	}
	return nil
}

func (e *Engine) volumeInfo(rec volumeRecord) engine.VolumeInfo {
	return volumeInfoOf(rec, e.volumeUsers()[rec.Name])
}

func volumeInfoOf(rec volumeRecord, users []string) engine.VolumeInfo {
	return engine.VolumeInfo{Name: rec.Name, CapacityBytes: rec.CapacityBytes, Created: rec.Created,
		LastAccessed: rec.LastAccessed, Labels: rec.Labels, UsedBy: users}
}

// volumeUsers maps each volume name to the live sandboxes that mount it.
func (e *Engine) volumeUsers() map[string][]string {
	e.sync()
	e.mu.Lock()
	boxes := make([]*box, 0, len(e.boxes))
	for _, bx := range e.boxes {
		boxes = append(boxes, bx)
	}
	e.mu.Unlock()
	users := map[string][]string{}
	for _, bx := range boxes {
		bx.mu.Lock()
		vols, id, pending := bx.st.Spec.Volumes, bx.st.ID, bx.pending
		bx.mu.Unlock()
		if len(vols) == 0 || (!pending && e.refresh(bx) == engine.StateDead) {
			continue
		}
		for _, v := range vols {
			users[v.Name] = append(users[v.Name], id)
		}
	}
	for _, ids := range users {
		sort.Strings(ids)
	}
	return users
}

// mountVolumes makes sure every volume of spec is mounted on the host, bumps its
// last-access time and returns the binds that put it into the sandbox.
func (e *Engine) mountVolumes(spec engine.Spec) ([]bindMount, error) {
	if len(spec.Volumes) == 0 {
		return nil, nil
	}
	var binds []bindMount
	seen := map[string]bool{}
	err := e.withVolumesLock(func() error {
		for _, v := range spec.Volumes {
			if !filepath.IsAbs(v.Target) || filepath.Clean(v.Target) == "/" {
				return fmt.Errorf("volume %q: target %q must be an absolute path below /", v.Name, v.Target)
			}
			if seen[filepath.Clean(v.Target)] {
				return fmt.Errorf("volume %q: target %q is used twice", v.Name, v.Target)
			}
			seen[filepath.Clean(v.Target)] = true
			if _, err := e.readVolume(v.Name); err != nil {
				return err
			}
			dir := e.volumeDir(v.Name)
			mnt := filepath.Join(dir, volumeMnt)
			if !isMountPoint(mnt) {
				if err := mountVolumeImage(filepath.Join(dir, volumeImage), mnt); err != nil {
					return fmt.Errorf("volume %q: %w", v.Name, err)
				}
			}
			now := time.Now()
			if err := os.Chtimes(filepath.Join(dir, volumeAccessed), now, now); err != nil {
				return err
			}
			binds = append(binds, bindMount{Source: mnt, Target: filepath.Clean(v.Target), ReadOnly: v.ReadOnly})
		}
		return nil
	})
	return binds, err
}

// mountVolumeImage mounts a volume's image on mnt. A loop device that still carries
// the image is mounted again, which gives back the same file system: a sandbox that
// ended, or one that merely started while the volume was mounted, keeps a copy of the
// mount in its shim's mount namespace until that shim is gone. A second loop device
// would be a second file system over the same blocks, each overwriting the other's
// metadata.
func mountVolumeImage(img, mnt string) error {
	const flags = unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOATIME
	for _, loop := range loopsBacking(img) {
		if err := unix.Mount("/dev/"+loop, mnt, "ext4", flags, ""); err == nil {
			return nil
		}
		// It cleared itself meanwhile, and its file system with it.
	}
	dev, err := attachLoop(img, false)
	if err != nil {
		return err
	}
	defer dev.Close()
	if err := unix.Mount(dev.Name(), mnt, "ext4", flags, ""); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	return nil
}

// loopsBacking names the loop devices ("loop3") whose backing file is img.
func loopsBacking(img string) []string {
	var out []string
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, d := range devs {
		if b, err := os.ReadFile(d); err == nil && strings.TrimSpace(string(b)) == img {
			out = append(out, strings.Split(d, "/")[3])
		}
	}
	return out
}

// releaseVolumes unmounts from the host the volumes of st that no other live sandbox
// mounts; the loop device frees itself with its last mount (autoclear), once the
// shims that still hold a copy of the mount have ended. A volume stays mounted while
// any sandbox uses it: a second mount of its image through another loop device would
// be a second file system over the same blocks.
func (e *Engine) releaseVolumes(st boxState) {
	if len(st.Spec.Volumes) == 0 {
		return
	}
	err := e.withVolumesLock(func() error {
		users := e.volumeUsers()
		for _, v := range st.Spec.Volumes {
			if others := slices.DeleteFunc(slices.Clone(users[v.Name]), func(id string) bool { return id == st.ID }); len(others) == 0 {
				unmountVolume(filepath.Join(e.volumeDir(v.Name), volumeMnt))
			}
		}
		return nil
	})
	if err != nil {
		e.log.Warn("release volumes", "sandbox", st.ID, "err", err)
	}
}

func unmountVolume(mnt string) {
	for isMountPoint(mnt) {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			return
		}
	}
}

// isMountPoint reports whether p is mounted on: its device differs from its parent's.
func isMountPoint(p string) bool {
	var st, parent syscall.Stat_t
	if syscall.Lstat(p, &st) != nil || syscall.Lstat(filepath.Dir(p), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// volumeOwnerIDs own a new volume's root: the sandbox user. Sandboxes bind volumes
// with their id mapping (idmapBind), so a volume holds the ids as a sandbox sees them
// and every sandbox that mounts it sees the same owners, whatever its runtime.
func volumeOwnerIDs() (uid, gid int) { return rules.UserID, rules.UserID }

// volumesUsable reports whether this machine can make and mount volumes: loop
// devices and mkfs.ext4/tune2fs.
func volumesUsable() bool {
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
