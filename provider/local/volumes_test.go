package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/volume"
)

func newVolumeEngine(t *testing.T) *Engine {
	t.Helper()
	e := newTestEngine(t)
	if !e.Capabilities().Volumes {
		t.Skip("no loop devices or e2fsprogs here: volumes are not offered")
	}
	return e
}

func createVolume(t *testing.T, e *Engine, name string, capacity int64) engine.VolumeInfo {
	t.Helper()
	v, err := e.CreateVolume(t.Context(), engine.VolumeSpec{Name: name, CapacityBytes: capacity, Labels: map[string]string{"k": "v"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.RemoveVolume(context.Background(), name); err != nil && !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("remove volume %s: %v", name, err)
		}
	})
	return v
}

// TestVolumeSharedAndKept: a volume written in sandbox A is read in sandbox B while both
// run, and again in a third sandbox after both are gone; a read-only mount refuses
// writes; the data never shows in the sandbox's own writable layer.
func TestVolumeSharedAndKept(t *testing.T) {
	e := newVolumeEngine(t)
	v := createVolume(t, e, "shared", 64<<20)
	if v.CapacityBytes != 64<<20 || v.Labels["k"] != "v" {
		t.Fatalf("CreateVolume = %+v, want 64 MiB with its labels", v)
	}
	if _, err := e.CreateVolume(t.Context(), engine.VolumeSpec{Name: "shared"}, false); !errors.Is(err, engine.ErrNameTaken) {
		t.Fatalf("CreateVolume of an existing name = %v, want ErrNameTaken", err)
	}
	if again, err := e.CreateVolume(t.Context(), engine.VolumeSpec{Name: "shared"}, true); err != nil || again.Created != v.Created {
		t.Fatalf("CreateVolume(ifMissing) = %+v, %v; want the existing volume", again, err)
	}

	a := createBox(t, e, engine.Spec{Volumes: []engine.VolumeMount{{Name: "shared", Target: "/data"}}})
	b := createBox(t, e, engine.Spec{Volumes: []engine.VolumeMount{{Name: "shared", Target: "/mnt/ro", ReadOnly: true}}})
	if len(a.Volumes) != 1 || a.Volumes[0].Target != "/data" {
		t.Errorf("Info.Volumes = %+v, want the /data mount", a.Volumes)
	}
	if out, code := sh(t, e, a.ID, "sh", "-c", "echo hello > /data/f && cat /data/f"); code != 0 || out != "hello\n" {
		t.Fatalf("write in A = %q, %d", out, code)
	}
	// Ownership as any sandbox sees it: root's file is root's, the user's is the user's.
	if out, code := sh(t, e, a.ID, "sh", "-c", "setpriv --reuid=1000 --regid=1000 --clear-groups touch /data/u && stat -c '%u %n' /data/f /data/u"); code != 0 || out != "0 /data/f\n1000 /data/u\n" {
		t.Fatalf("owners in A = %q, %d; want 0 and 1000", out, code)
	}
	if out, code := sh(t, e, b.ID, "stat", "-c", "%u %U", "/mnt/ro/u"); code != 0 || out != "1000 user\n" {
		t.Fatalf("owner in B = %q, %d; want 1000 user", out, code)
	}
	if out, code := sh(t, e, b.ID, "cat", "/mnt/ro/f"); code != 0 || out != "hello\n" {
		t.Fatalf("read in B while A runs = %q, %d; want hello", out, code)
	}
	if out, code := sh(t, e, b.ID, "sh", "-c", "echo x > /mnt/ro/g"); code == 0 {
		t.Fatalf("write to a read-only volume mount succeeded: %q", out)
	}
	got, err := e.GetVolume(t.Context(), "shared")
	if err != nil || strings.Join(got.UsedBy, ",") != strings.Join(sortedIDs(a.ID, b.ID), ",") {
		t.Fatalf("GetVolume.UsedBy = %v, %v; want %s and %s", got.UsedBy, err, a.ID, b.ID)
	}
	if !got.LastAccessed.After(v.LastAccessed) {
		t.Errorf("LastAccessed %v not bumped past %v by the mounts", got.LastAccessed, v.LastAccessed)
	}
	if _, err := os.Stat(filepath.Join(a.Home, "..", "tmp", "f")); err == nil {
		t.Error("the volume's file shows in the sandbox's own directory")
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := e.Terminate(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	c := createBox(t, e, engine.Spec{Volumes: []engine.VolumeMount{{Name: "shared", Target: "/home/user/data"}}})
	if out, code := sh(t, e, c.ID, "cat", "/home/user/data/f"); code != 0 || out != "hello\n" {
		t.Fatalf("read after both sandboxes ended = %q, %d; want hello", out, code)
	}
}

// TestVolumeRemoveInUse: removing a mounted volume is refused with the names of the
// sandboxes using it; once they are gone it is removed with its data.
func TestVolumeRemoveInUse(t *testing.T) {
	e := newVolumeEngine(t)
	createVolume(t, e, "busy", 16<<20)
	box := createBox(t, e, engine.Spec{Volumes: []engine.VolumeMount{{Name: "busy", Target: "/data"}}})
	err := e.RemoveVolume(t.Context(), "busy")
	if !errors.Is(err, engine.ErrInUse) || !strings.Contains(err.Error(), box.ID) {
		t.Fatalf("RemoveVolume in use = %v, want ErrInUse naming %s", err, box.ID)
	}
	if err := e.Terminate(t.Context(), box.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.RemoveVolume(t.Context(), "busy"); err != nil {
		t.Fatalf("RemoveVolume after terminate: %v", err)
	}
	if volume.IsMountPoint(e.vols.MountPath("busy")) {
		t.Error("a removed volume stays mounted on the host")
	}
	if _, err := os.Stat(e.vols.Dir("busy")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory left after remove: %v", err)
	}
	if _, err := e.GetVolume(t.Context(), "busy"); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("GetVolume after remove = %v, want ErrNotFound", err)
	}
	if _, err := e.Create(t.Context(), engine.Spec{Volumes: []engine.VolumeMount{{Name: "busy", Target: "/data"}}}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Create with a removed volume = %v, want ErrNotFound", err)
	}
	vols, err := e.ListVolumes(t.Context())
	if err != nil || len(vols) != 0 {
		t.Errorf("ListVolumes = %+v, %v; want none", vols, err)
	}
}

// TestVolumeCapacity: a 100 MB volume takes 100 MB from a sandbox user and refuses the
// 101st with ENOSPC; the host's image file stays within its size.
func TestVolumeCapacity(t *testing.T) {
	e := newVolumeEngine(t)
	const capacity = 100 << 20
	createVolume(t, e, "cap", capacity)
	box := createBox(t, e, engine.Spec{Volumes: []engine.VolumeMount{{Name: "cap", Target: "/data"}}})
	// Root inside is not root on the host: the reserve holds for it too.
	script := `dd if=/dev/zero of=/data/a bs=1M count=100 status=none && echo first100ok
dd if=/dev/zero of=/data/b bs=1M count=1 status=none 2>&1`
	out, _ := sh(t, e, box.ID, "sh", "-c", script)
	if !strings.Contains(out, "first100ok") {
		t.Fatalf("writing the first 100 MB failed: %s", out)
	}
	if !strings.Contains(out, "No space left on device") {
		t.Fatalf("the 101st MB was taken: %s", out)
	}
	var st os.FileInfo
	st, err := os.Stat(e.vols.ImagePath("cap"))
	if err != nil {
		t.Fatal(err)
	}
	// The image is sparse: what it takes from the host disk is its allocated blocks.
	if used := st.Sys().(*syscall.Stat_t).Blocks * 512; used > capacity+capacity/8 {
		t.Errorf("image takes %d bytes of the host disk for a capacity of %d", used, capacity)
	}
}

func TestVolumeRefusals(t *testing.T) {
	e := newVolumeEngine(t)
	createVolume(t, e, "v1", 16<<20)
	tests := []struct {
		name string
		spec engine.Spec
	}{
		{"relative target", engine.Spec{Volumes: []engine.VolumeMount{{Name: "v1", Target: "data"}}}},
		{"root target", engine.Spec{Volumes: []engine.VolumeMount{{Name: "v1", Target: "/"}}}},
		{"target twice", engine.Spec{Volumes: []engine.VolumeMount{{Name: "v1", Target: "/a"}, {Name: "v1", Target: "/a/"}}}},
		{"unknown volume", engine.Spec{Volumes: []engine.VolumeMount{{Name: "nope", Target: "/a"}}}},
		{"bad name", engine.Spec{Volumes: []engine.VolumeMount{{Name: "../x", Target: "/a"}}}},
	}
	for _, tt := range tests {
		if info, err := e.Create(t.Context(), tt.spec); err == nil {
			_ = e.Terminate(context.Background(), info.ID)
			t.Errorf("%s: Create(%+v) succeeded, want an error", tt.name, tt.spec.Volumes)
		}
	}
	for _, c := range []int64{1, 1 << 50} {
		if _, err := e.CreateVolume(t.Context(), engine.VolumeSpec{Name: "sized", CapacityBytes: c}, false); err == nil {
			t.Errorf("CreateVolume(capacity %d) succeeded, want an error", c)
		}
	}
}

func sortedIDs(ids ...string) []string {
	if ids[0] > ids[1] {
		ids[0], ids[1] = ids[1], ids[0]
	}
	return ids
}

// BenchmarkCreateWithVolume is BenchmarkEngineCreate with one volume mounted (the
// first create mounts it on the host; every create binds it and bumps its last access).
// The difference between the two is the volume's cost at create.
func BenchmarkCreateWithVolume(b *testing.B) {
	e := benchEngine(b)
	if !e.Capabilities().Volumes {
		b.Skip("volumes are not offered here")
	}
	if _, err := e.CreateVolume(b.Context(), engine.VolumeSpec{Name: "bench", CapacityBytes: 64 << 20}, false); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.RemoveVolume(context.Background(), "bench") })
	for b.Loop() {
		info, err := e.Create(b.Context(), engine.Spec{Ports: []int{4000}, Volumes: []engine.VolumeMount{{Name: "bench", Target: "/workspace"}}})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := e.Terminate(b.Context(), info.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// TestVolumeEngineFiles: the engine's file calls reach into a volume (an id-mapped
// mount, where the host's root has no id) and what they write belongs to the sandbox.
func TestVolumeEngineFiles(t *testing.T) {
	e := newVolumeEngine(t)
	createVolume(t, e, "files", 16<<20)
	box := createBox(t, e, engine.Spec{Volumes: []engine.VolumeMount{{Name: "files", Target: "/data"}}})
	if err := e.WriteFile(t.Context(), box.ID, "/data/sub/f", []byte("via engine"), 0o644); err != nil {
		t.Fatalf("WriteFile into a volume: %v", err)
	}
	if err := e.WriteFile(t.Context(), box.ID, "/tmp/g", []byte("tmp"), 0o600); err != nil {
		t.Fatalf("WriteFile into /tmp: %v", err)
	}
	if out, code := sh(t, e, box.ID, "sh", "-c", "cat /data/sub/f && stat -c '%u %n' /data/sub /data/sub/f /tmp/g"); code != 0 ||
		out != "via engine1000 /data/sub\n1000 /data/sub/f\n0 /tmp/g\n" {
		t.Fatalf("inside = %q, %d; want the text, the volume's files the user's (its root is), /tmp's root's", out, code)
	}
	if err := e.Remove(t.Context(), box.ID, "/data/sub"); err != nil {
		t.Fatalf("Remove in a volume: %v", err)
	}
}

// TestVolumeReleasedWhenUnused: a volume stays mounted on the host while a sandbox
// uses it and is released (no mount, no loop device) when the last one ends; the
// data dir is then removable.
func TestVolumeReleasedWhenUnused(t *testing.T) {
	e := newVolumeEngine(t)
	createVolume(t, e, "shared", 16<<20)
	spec := engine.Spec{Volumes: []engine.VolumeMount{{Name: "shared", Target: "/data"}}}
	a := createBox(t, e, spec)
	b := createBox(t, e, spec)
	if out, code := sh(t, e, a.ID, "sh", "-c", "echo kept > /data/f"); code != 0 {
		t.Fatalf("write in a: %q (exit %d)", out, code)
	}
	if err := e.Terminate(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	mnt := e.vols.MountPath("shared")
	if !volume.IsMountPoint(mnt) {
		t.Fatal("the volume was released while another sandbox uses it")
	}
	if out, _ := sh(t, e, b.ID, "cat", "/data/f"); out != "kept\n" {
		t.Errorf("read in b = %q, want kept", out)
	}
	if err := e.Terminate(t.Context(), b.ID); err != nil {
		t.Fatal(err)
	}
	if volume.IsMountPoint(mnt) {
		t.Error("the volume stays mounted on the host after its last sandbox ended")
	}
	img := e.vols.ImagePath("shared")
	// The kernel frees an autoclear loop device after its last close, asynchronously:
	// a loaded machine takes seconds.
	for i := 0; loopBacking(img) != ""; i++ {
		if i == 1500 {
			t.Fatalf("loop device %s still backs %s", loopBacking(img), img)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.RemoveAll(e.dir); err != nil {
		t.Errorf("rm -rf of the data dir: %v", err)
	}
}

// loopBacking names a loop device whose backing file is img, if any.
func loopBacking(img string) string {
	if l := volume.LoopsBacking(img); len(l) > 0 {
		return l[0]
	}
	return ""
}

// A sandbox that started while a volume was mounted keeps a copy of that mount in its
// shim's namespace. After the volume's last user ends, the next user must get that
// same file system back, never a second one over the same blocks.
func TestVolumeRemountKeepsOneFileSystem(t *testing.T) {
	e := newVolumeEngine(t)
	createVolume(t, e, "again", 16<<20)
	spec := engine.Spec{Volumes: []engine.VolumeMount{{Name: "again", Target: "/data"}}}
	a := createBox(t, e, spec)
	bystander := createBox(t, e, engine.Spec{})
	if out, code := sh(t, e, a.ID, "sh", "-c", "echo one > /data/f && sync"); code != 0 {
		t.Fatalf("write in a: %q (exit %d)", out, code)
	}
	if err := e.Terminate(t.Context(), a.ID); err != nil {
		t.Fatal(err)
	}
	c := createBox(t, e, spec)
	img := e.vols.ImagePath("again")
	if loops := volume.LoopsBacking(img); len(loops) != 1 {
		t.Errorf("loop devices over %s after a remount: %v; want exactly one (one file system)", img, loops)
	}
	if out, _ := sh(t, e, c.ID, "cat", "/data/f"); out != "one\n" {
		t.Errorf("read in c = %q, want one", out)
	}
	if out, code := sh(t, e, c.ID, "sh", "-c", "echo two > /data/f && sync"); code != 0 {
		t.Fatalf("write in c: %q (exit %d)", out, code)
	}
	for _, id := range []string{bystander.ID, c.ID} {
		if err := e.Terminate(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	d := createBox(t, e, spec)
	if out, _ := sh(t, e, d.ID, "cat", "/data/f"); out != "two\n" {
		t.Errorf("read in d = %q, want two", out)
	}
}
