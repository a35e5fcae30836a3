package cgroup

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// TestCgroupSweep: Sweep removes a sandbox-named group with no process once it
// is older than minAge, and leaves a younger one and one that holds a process.
func TestCgroupSweep(t *testing.T) {
	cg := Detect()
	if len(cg.v1) == 0 && cg.v2 == "" {
		t.Skip("no cgroup hierarchy accepts children here")
	}
	prefix := "sandbox-sweeptest-" + strconv.Itoa(os.Getpid()) + "-"
	var dirs []string
	for _, d := range cg.v1 {
		dirs = append(dirs, d)
	}
	if cg.v2 != "" {
		dirs = append(dirs, cg.v2)
	}
	var made []string
	for _, d := range dirs {
		g := filepath.Join(d, prefix+"empty")
		if err := os.Mkdir(g, 0o755); err != nil {
			t.Fatal(err)
		}
		made = append(made, g)
	}
	t.Cleanup(func() {
		for _, g := range made {
			os.Remove(g)
		}
	})
	cg.Sweep(prefix, time.Hour)
	for _, g := range made {
		if _, err := os.Stat(g); err != nil {
			t.Errorf("Sweep with minAge 1h removed the new group %s: %v", g, err)
		}
	}
	cg.Sweep(prefix, 0)
	for _, g := range made {
		if _, err := os.Stat(g); !os.IsNotExist(err) {
			t.Errorf("Sweep left the empty group %s (stat: %v)", g, err)
		}
	}
	// A group holding a process stays: rmdir refuses it.
	busy := filepath.Join(dirs[0], prefix+"busy")
	if err := os.Mkdir(busy, 0o755); err != nil {
		t.Fatal(err)
	}
	made = append(made, busy)
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	if err := writeCg(busy, "cgroup.procs", strconv.Itoa(sleep.Process.Pid)); err != nil {
		t.Fatal(err)
	}
	cg.Sweep(prefix, 0)
	if _, err := os.Stat(busy); err != nil {
		t.Errorf("Sweep removed a group that holds a process: %v", err)
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	cg.Remove([]string{busy})
	if _, err := os.Stat(busy); !os.IsNotExist(err) {
		t.Errorf("Remove left %s after its process ended (stat: %v)", busy, err)
	}
}

// TestMakeEnterFreezeRemove makes a sandbox's groups with limits, puts a process in,
// freezes and thaws it, and removes the groups once it is gone.
func TestMakeEnterFreezeRemove(t *testing.T) {
	cg := Detect()
	if !cg.Limits() {
		t.Skip("no cgroup hierarchy with limits accepts children here")
	}
	id := "sb-cgtest-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
	ask := engine.Limits{MemoryBytes: 64 << 20, Pids: 32}
	applied, groups := cg.Make(id, ask)
	t.Cleanup(func() { cg.Remove(groups) })
	if len(groups) == 0 {
		t.Fatal("Make made no group")
	}
	for _, g := range groups {
		if filepath.Base(g) != Name(id) {
			t.Errorf("group %s, want it named %s", g, Name(id))
		}
	}
	if cg.Controls("memory") && applied.MemoryBytes != ask.MemoryBytes {
		t.Errorf("applied memory = %d, want %d", applied.MemoryBytes, ask.MemoryBytes)
	}
	if cg.Controls("pids") && applied.Pids != ask.Pids {
		t.Errorf("applied pids = %d, want %d", applied.Pids, ask.Pids)
	}
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	cg.Enter(groups, sleep.Process.Pid)
	for _, g := range groups {
		b, err := os.ReadFile(filepath.Join(g, "cgroup.procs"))
		if err != nil || !strings.Contains(string(b), strconv.Itoa(sleep.Process.Pid)) {
			t.Errorf("%s/cgroup.procs = %q (%v), want the entered pid", g, b, err)
		}
	}
	if cg.Freezer() {
		if err := cg.SetFrozen(groups, true); err != nil {
			t.Errorf("freeze: %v", err)
		}
		if err := cg.SetFrozen(groups, false); err != nil {
			t.Errorf("thaw: %v", err)
		}
	} else if err := cg.SetFrozen(groups, true); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("freeze without a freezer = %v, want ErrUnsupported", err)
	}
	_ = sleep.Process.Kill()
	_ = sleep.Wait()
	cg.Remove(groups)
	for _, g := range groups {
		if _, err := os.Stat(g); !os.IsNotExist(err) {
			t.Errorf("Remove left %s (stat: %v)", g, err)
		}
	}
}
