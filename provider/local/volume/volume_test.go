package volume

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/rootfs"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// users is a fake census of live sandboxes: the store under test is real, only the
// engine that would count its sandboxes is not here.
type users struct {
	mu sync.Mutex
	m  map[string][]string
}

func (u *users) set(name string, ids ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.m[name] = ids
}

func (u *users) get() map[string][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := map[string][]string{}
	for k, v := range u.m {
		if len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

func newStore(t *testing.T) (*Store, *users) {
	t.Helper()
	if os.Geteuid() != 0 || !Usable() {
		t.Skip("volumes need root, loop devices and e2fsprogs")
	}
	u := &users{m: map[string][]string{}}
	return NewStore(filepath.Join(t.TempDir(), "volumes"), u.get, slog.New(slog.NewTextHandler(io.Discard, nil))), u
}

// waitNoLoop waits out the kernel's asynchronous autoclear of img's loop devices.
func waitNoLoop(t *testing.T, img string) {
	t.Helper()
	for i := 0; len(LoopsBacking(img)) > 0; i++ {
		if i == 1500 {
			t.Fatalf("loop devices %v still back %s", LoopsBacking(img), img)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStoreLifecycle walks one volume through create, mount by two sandboxes,
// release by each, and removal: it stays mounted while any sandbox uses it, is
// unmounted and its loop device freed after the last, and only then may go.
func TestStoreLifecycle(t *testing.T) {
	s, u := newStore(t)
	v, err := s.Create(t.Context(), engine.VolumeSpec{Name: "data", CapacityBytes: rules.MinVolumeBytes, Labels: map[string]string{"k": "v"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name != "data" || v.CapacityBytes != rules.MinVolumeBytes || v.Labels["k"] != "v" {
		t.Errorf("Create = %+v, want data of %d bytes labelled k=v", v, int64(rules.MinVolumeBytes))
	}
	if _, err := s.Create(t.Context(), engine.VolumeSpec{Name: "data"}, false); !errors.Is(err, engine.ErrNameTaken) {
		t.Errorf("Create of an existing name = %v, want ErrNameTaken", err)
	}
	if again, err := s.Create(t.Context(), engine.VolumeSpec{Name: "data"}, true); err != nil || again.Created != v.Created {
		t.Errorf("Create(ifMissing) = %+v, %v; want the existing volume", again, err)
	}
	mounts := []engine.VolumeMount{{Name: "data", Target: "/data/"}}
	for _, id := range []string{"sb-a", "sb-b"} {
		binds, err := s.Mount(mounts)
		if err != nil {
			t.Fatal(err)
		}
		if want := (rootfs.Bind{Source: s.MountPath("data"), Target: "/data"}); len(binds) != 1 || binds[0] != want {
			t.Fatalf("Mount = %+v, want [%+v]", binds, want)
		}
		u.set("data", append(u.get()["data"], id)...)
	}
	if l := LoopsBacking(s.ImagePath("data")); len(l) != 1 {
		t.Errorf("loop devices over the image after two mounts: %v, want one", l)
	}
	if err := s.Remove(t.Context(), "data"); !errors.Is(err, engine.ErrInUse) {
		t.Errorf("Remove of a mounted volume = %v, want ErrInUse", err)
	}
	s.Release("sb-a", mounts)
	u.set("data", "sb-b")
	if !IsMountPoint(s.MountPath("data")) {
		t.Fatal("released while another sandbox uses it")
	}
	s.Release("sb-b", mounts)
	u.set("data")
	if IsMountPoint(s.MountPath("data")) {
		t.Fatal("still mounted after its last sandbox released it")
	}
	waitNoLoop(t, s.ImagePath("data"))
	if err := s.Remove(t.Context(), "data"); err != nil {
		t.Fatal(err)
	}
	if vols, err := s.List(t.Context()); err != nil || len(vols) != 0 {
		t.Errorf("List after Remove = %+v, %v; want none", vols, err)
	}
	if _, err := s.Get(t.Context(), "data"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get after Remove = %v, want ErrNotFound", err)
	}
}

// TestStoreRefusals: bad mounts and names are refused before anything is mounted.
func TestStoreRefusals(t *testing.T) {
	s, _ := newStore(t)
	if _, err := s.Create(t.Context(), engine.VolumeSpec{Name: "v1", CapacityBytes: rules.MinVolumeBytes}, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Remove(t.Context(), "v1") })
	for _, tt := range []struct {
		name string
		vols []engine.VolumeMount
	}{
		{"relative target", []engine.VolumeMount{{Name: "v1", Target: "data"}}},
		{"root target", []engine.VolumeMount{{Name: "v1", Target: "/"}}},
		{"target twice", []engine.VolumeMount{{Name: "v1", Target: "/a"}, {Name: "v1", Target: "/a/"}}},
		{"unknown volume", []engine.VolumeMount{{Name: "nope", Target: "/a"}}},
		{"bad name", []engine.VolumeMount{{Name: "../x", Target: "/a"}}},
	} {
		if binds, err := s.Mount(tt.vols); err == nil {
			t.Errorf("%s: Mount(%+v) = %+v, want an error", tt.name, tt.vols, binds)
		}
	}
	if IsMountPoint(s.MountPath("v1")) {
		t.Error("a refused mount left the volume mounted")
	}
	for _, tt := range []struct {
		name string
		spec engine.VolumeSpec
	}{
		{"bad name", engine.VolumeSpec{Name: "../x"}},
		{"too small", engine.VolumeSpec{Name: "small", CapacityBytes: rules.MinVolumeBytes - 1}},
		{"too large", engine.VolumeSpec{Name: "large", CapacityBytes: rules.MaxVolumeBytes + 1}},
	} {
		if v, err := s.Create(t.Context(), tt.spec, false); err == nil {
			t.Errorf("%s: Create(%+v) = %+v, want an error", tt.name, tt.spec, v)
		}
	}
}

// TestStoresTakeTurns: stores of one data dir (as of two processes) creating the same
// volume at once make it once, and both get it.
func TestStoresTakeTurns(t *testing.T) {
	s, u := newStore(t)
	other := NewStore(s.dir, u.get, s.log)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, st := range []*Store{s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = st.Create(t.Context(), engine.VolumeSpec{Name: "both", CapacityBytes: rules.MinVolumeBytes}, true)
		}()
	}
	wg.Wait()
	if errors.Join(errs...) != nil {
		t.Fatalf("Create from two stores: %v", errs)
	}
	if vols, err := s.List(t.Context()); err != nil || len(vols) != 1 {
		t.Errorf("List = %+v, %v; want one volume", vols, err)
	}
	if err := other.Remove(t.Context(), "both"); err != nil {
		t.Fatal(err)
	}
}

// TestDisk makes a sandbox's disk from a template, checks it is mounted, sparse and of
// the size asked, and that it goes with UnmountDisk.
func TestDisk(t *testing.T) {
	if os.Geteuid() != 0 || !Usable() {
		t.Skip("disks need root, loop devices and e2fsprogs")
	}
	d := NewDisks(filepath.Join(t.TempDir(), "disks"))
	if err := d.Make(t.TempDir(), MinDiskBytes-1); !errors.Is(err, engine.ErrLimit) {
		t.Errorf("Make below the minimum = %v, want ErrLimit", err)
	}
	for range 2 { // the second is made from the template the first made
		sd := t.TempDir()
		if err := d.Make(sd, 32<<20); err != nil {
			t.Fatal(err)
		}
		mnt := filepath.Join(sd, DiskDir)
		if !IsMountPoint(mnt) {
			UnmountDisk(sd)
			t.Fatal("the disk is not mounted")
		}
		var fs syscall.Statfs_t
		if err := syscall.Statfs(mnt, &fs); err != nil || int64(fs.Blocks)*fs.Bsize > 32<<20 {
			t.Errorf("disk of %d bytes (%v), want at most %d", int64(fs.Blocks)*fs.Bsize, err, 32<<20)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(sd, DiskImage), &st); err != nil || st.Size != 32<<20 || st.Blocks*512 >= 8<<20 {
			t.Errorf("image of %d bytes, %d allocated (%v): want 32 MiB, sparse", st.Size, st.Blocks*512, err)
		}
		UnmountDisk(sd)
		if IsMountPoint(mnt) {
			t.Error("still mounted after UnmountDisk")
		}
		waitNoLoop(t, filepath.Join(sd, DiskImage))
	}
}

// TestCopySparse copies a file with holes: same bytes, holes kept.
func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 1 << 20, 63 << 20} {
		if _, err := f.WriteAt(bytes.Repeat([]byte{byte(off>>20) + 1}, 4096), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	if err := copySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(src)
	b, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("copy differs from its source (%v)", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dst, &st); err != nil || st.Blocks*512 > 4<<20 {
		t.Errorf("copy allocates %d bytes (%v), want its holes kept", st.Blocks*512, err)
	}
	if err := copySparse(src, dst); err == nil {
		t.Error("copySparse over an existing file succeeded, want an error")
	}
}
