// Package volume is the local engine's storage on loop-mounted ext4 images: named
// volumes that outlive sandboxes (Store) and each sandbox's disk (Disks). Package
// local, the engine, is its one importer: it tells a Store which sandboxes use which
// volume and puts the rootfs binds a Store's Mount returns into its sandboxes' roots.
//
// A volume is an ext4 filesystem in a sparse image file (<dir>/<name>/data.img) whose
// capacity holds for every sandbox: the filesystem is a little larger than the
// capacity and the difference is reserved for the host's root, which no sandbox is
// (user namespaces map sandbox root elsewhere), so the sandbox gets ENOSPC at exactly
// the capacity and the host disk is never written past it. The store loop-mounts it at
// <dir>/<name>/mnt (nodev, nosuid) at its first use and unmounts it when the last
// sandbox that uses it ends — one superblock for the file, whatever the order in
// which sandboxes' mount namespaces go away (two mounts of one image through two loop
// devices would corrupt it) — and each sandbox binds that mount at its target with
// its id mapping: several sandboxes share one mount, so they see each other's writes
// at once, and a file's owner is the same from every sandbox.
package volume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"
	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/rootfs"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

const (
	volumeMeta  = "volume.json"
	volumeImage = "data.img"
	volumeMnt   = "mnt"
	// volumeAccessed's mtime is the last access: one utimensat per mount, no rewrite.
	volumeAccessed = "accessed"
)

// record is <dir>/<name>/volume.json.
type record struct {
	Name          string            `json:"name"`
	CapacityBytes int64             `json:"capacityBytes"`
	Created       time.Time         `json:"created"`
	LastAccessed  time.Time         `json:"lastAccessed"`
	Labels        map[string]string `json:"labels,omitempty"`
}

// Store is the volumes of one data dir. Stores of several processes on one data dir
// take turns through a lock file, so no two create, mount or remove one volume at
// once.
type Store struct {
	dir   string
	lock  *lockedfile.Mutex
	users func() map[string][]string
	log   *slog.Logger
}

// NewStore keeps volumes in dir (<data dir>/volumes). users maps each volume name to
// the live sandboxes that mount it, sorted; log receives what a release could not do.
func NewStore(dir string, users func() map[string][]string, log *slog.Logger) *Store {
	return &Store{dir: dir, lock: lockedfile.MutexAt(filepath.Join(dir, ".lock")), users: users, log: log}
}

// Dir is the directory of the volume name.
func (s *Store) Dir(name string) string { return filepath.Join(s.dir, name) }

// MountPath is where the volume name is mounted on the host while sandboxes use it.
func (s *Store) MountPath(name string) string { return filepath.Join(s.Dir(name), volumeMnt) }

// ImagePath is the image file that holds the volume name's filesystem.
func (s *Store) ImagePath(name string) string { return filepath.Join(s.Dir(name), volumeImage) }

// locked runs f holding the data dir's volume lock.
func (s *Store) locked(f func() error) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	unlock, err := s.lock.Lock()
	if err != nil {
		return err
	}
	defer unlock()
	return f()
}

// Create makes a volume: a sparse image with an ext4 filesystem whose space for
// sandboxes is exactly the capacity. With ifMissing an existing volume of that name
// is returned as it is; without, it is refused with engine.ErrNameTaken.
func (s *Store) Create(ctx context.Context, spec engine.VolumeSpec, ifMissing bool) (engine.VolumeInfo, error) {
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
	var rec record
	err := s.locked(func() error {
		if r, err := s.read(spec.Name); err == nil {
			if !ifMissing {
				return fmt.Errorf("volume %q exists: %w", spec.Name, engine.ErrNameTaken)
			}
			rec = r
			return nil
		}
		now := time.Now().UTC()
		rec = record{Name: spec.Name, CapacityBytes: capacity, Created: now, LastAccessed: now, Labels: spec.Labels}
		return s.make(ctx, rec)
	})
	if err != nil {
		return engine.VolumeInfo{}, fmt.Errorf("create volume: %w", err)
	}
	return infoOf(rec, s.users()[rec.Name]), nil
}

// make builds the volume in a temporary directory and renames it into place, so a
// crash never leaves a half-made volume under its name.
func (s *Store) make(ctx context.Context, rec record) error {
	tmp, err := os.MkdirTemp(s.dir, ".new-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := makeFS(ctx, filepath.Join(tmp, volumeImage), filepath.Join(tmp, volumeMnt), rec.CapacityBytes); err != nil {
		return err
	}
	if err := write(tmp, rec); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, volumeAccessed), nil, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.Dir(rec.Name))
}

// makeFS makes the image: capacity plus room for the filesystem's own metadata, then
// measures what a non-root writer may use and reserves the rest for the host's root.
// A little slack above the capacity pays for the files' own extent blocks, so a file
// of exactly the capacity fits and one megabyte more does not.
func makeFS(ctx context.Context, img, mnt string, capacity int64) error {
	want := capacity + capacity/256 + 256<<10
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return err
	}
	overhead := max(8<<20, capacity/16)
	for range 4 {
		avail, bsize, err := mkfs(ctx, img, mnt, capacity+overhead)
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

// mkfs makes a sparse image of size bytes with an ext4 filesystem owned by the
// sandbox user, and reports what statfs offers a non-root writer. Sandboxes bind
// volumes with their id mapping, so a volume holds the ids as a sandbox sees them and
// every sandbox that mounts it sees the same owners, whatever its runtime.
func mkfs(ctx context.Context, img, mnt string, size int64) (avail, bsize int64, err error) {
	f, err := os.OpenFile(img, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, 0, err
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return 0, 0, err
	}
	owner := fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,nodiscard", rules.UserID, rules.UserID)
	if err := runTool(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner, img); err != nil {
		return 0, 0, err
	}
	return measure(img, mnt)
}

// measure mounts the image once to read what statfs offers a non-root writer.
func measure(img, mnt string) (avail, bsize int64, err error) {
	if err := loopMount(img, mnt, unix.MS_NODEV|unix.MS_NOSUID|unix.MS_NOEXEC, ""); err != nil {
		return 0, 0, err
	}
	defer unix.Unmount(mnt, 0)
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * st.Bsize, st.Bsize, nil
}

func (s *Store) read(name string) (record, error) {
	var rec record
	if rules.ValidateVolumeName(name) != nil {
		return rec, fmt.Errorf("volume %q: %w", name, engine.ErrNotFound)
	}
	b, err := os.ReadFile(filepath.Join(s.Dir(name), volumeMeta))
	if errors.Is(err, os.ErrNotExist) {
		return rec, fmt.Errorf("volume %q: %w", name, engine.ErrNotFound)
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		return rec, fmt.Errorf("volume %q: %w", name, err)
	}
	if st, err := os.Stat(filepath.Join(s.Dir(name), volumeAccessed)); err == nil && st.ModTime().After(rec.LastAccessed) {
		rec.LastAccessed = st.ModTime().UTC()
	}
	return rec, nil
}

func write(dir string, rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, volumeMeta), b, 0o600)
}

// Get describes one volume.
func (s *Store) Get(ctx context.Context, name string) (engine.VolumeInfo, error) {
	rec, err := s.read(name)
	if err != nil {
		return engine.VolumeInfo{}, err
	}
	return infoOf(rec, s.users()[rec.Name]), nil
}

// List describes every volume, by name.
func (s *Store) List(ctx context.Context) ([]engine.VolumeInfo, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	users := s.users()
	out := []engine.VolumeInfo{}
	for _, ent := range entries {
		rec, err := s.read(ent.Name())
		if err != nil {
			continue // a temporary directory or a volume being removed
		}
		out = append(out, infoOf(rec, users[rec.Name]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes a volume that no live sandbox mounts (else engine.ErrInUse).
func (s *Store) Remove(ctx context.Context, name string) error {
	err := s.locked(func() error {
		if _, err := s.read(name); err != nil {
			return err
		}
		if users := s.users()[name]; len(users) > 0 {
			return fmt.Errorf("volume %q is mounted by %s: %w", name, strings.Join(users, ", "), engine.ErrInUse)
		}
		unmountAll(s.MountPath(name))
		// Rename first: a crash mid-removal leaves no half volume under the name.
		gone := filepath.Join(s.dir, ".rm-"+name)
		if err := os.Rename(s.Dir(name), gone); err != nil {
			return err
		}
		return os.RemoveAll(gone)
	})
	if err != nil {
		return fmt.Errorf("remove volume: %w", err)
	}
	return nil
}

func infoOf(rec record, users []string) engine.VolumeInfo {
	return engine.VolumeInfo{Name: rec.Name, CapacityBytes: rec.CapacityBytes, Created: rec.Created,
		LastAccessed: rec.LastAccessed, Labels: rec.Labels, UsedBy: users}
}

// Mount makes sure every volume of vols is mounted on the host, bumps its last-access
// time and returns the binds that put it into the sandbox. It refuses, before
// mounting any, a target that is not absolute below /, one used twice, and a volume
// that does not exist (engine.ErrNotFound). A mount that fails midway may leave the
// volumes before it mounted: the caller releases vols as for an ended sandbox.
func (s *Store) Mount(vols []engine.VolumeMount) ([]rootfs.Bind, error) {
	if len(vols) == 0 {
		return nil, nil
	}
	var binds []rootfs.Bind
	err := s.locked(func() error {
		seen := map[string]bool{}
		for _, v := range vols {
			target := filepath.Clean(v.Target)
			if !filepath.IsAbs(v.Target) || target == "/" {
				return fmt.Errorf("volume %q: target %q must be an absolute path below /", v.Name, v.Target)
			}
			if seen[target] {
				return fmt.Errorf("volume %q: target %q is used twice", v.Name, v.Target)
			}
			seen[target] = true
			if _, err := s.read(v.Name); err != nil {
				return err
			}
		}
		for _, v := range vols {
			mnt := s.MountPath(v.Name)
			if !IsMountPoint(mnt) {
				if err := mountImage(s.ImagePath(v.Name), mnt); err != nil {
					return fmt.Errorf("volume %q: %w", v.Name, err)
				}
			}
			now := time.Now()
			if err := os.Chtimes(filepath.Join(s.Dir(v.Name), volumeAccessed), now, now); err != nil {
				return err
			}
			binds = append(binds, rootfs.Bind{Source: mnt, Target: filepath.Clean(v.Target), ReadOnly: v.ReadOnly})
		}
		return nil
	})
	return binds, err
}

// mountImage mounts a volume's image on mnt. A loop device that still carries the
// image is mounted again, which gives back the same file system: a sandbox that
// ended, or one that merely started while the volume was mounted, keeps a copy of the
// mount in its shim's mount namespace until that shim is gone. A second loop device
// would be a second file system over the same blocks, each overwriting the other's
// metadata.
func mountImage(img, mnt string) error {
	const flags = unix.MS_NODEV | unix.MS_NOSUID | unix.MS_NOATIME
	for _, loop := range LoopsBacking(img) {
		if err := unix.Mount("/dev/"+loop, mnt, "ext4", flags, ""); err == nil {
			return nil
		}
		// It cleared itself meanwhile, and its file system with it.
	}
	return loopMount(img, mnt, flags, "")
}

// Release unmounts from the host the volumes of vols, mounted by the sandbox id, that
// no other live sandbox mounts; the loop device frees itself with its last mount
// (autoclear), once the shims that still hold a copy of the mount have ended. A volume
// stays mounted while any sandbox uses it: a second mount of its image through another
// loop device would be a second file system over the same blocks.
func (s *Store) Release(id string, vols []engine.VolumeMount) {
	if len(vols) == 0 {
		return
	}
	err := s.locked(func() error {
		users := s.users()
		for _, v := range vols {
			if others := slices.DeleteFunc(slices.Clone(users[v.Name]), func(u string) bool { return u == id }); len(others) == 0 {
				unmountAll(s.MountPath(v.Name))
			}
		}
		return nil
	})
	if err != nil {
		s.log.Warn("release volumes", "sandbox", id, "err", err)
	}
}
