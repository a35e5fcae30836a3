package services

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// TestOrphanSweepFindsClearedEnvironment: what an unrecorded run left behind
// is found through its monitor even when it cleared its environment (env -i:
// no instance marker) and is in no run's process group, so nothing but its
// parent links it to the run. The start-up sweep stops it; SIGKILLing the
// monitor first would have re-parented it out of reach.
func TestOrphanSweepFindsClearedEnvironment(t *testing.T) {
	dir := t.TempDir()
	id := statePrefix(dir) + "-fedcba9876543210fedcba98"
	tag := strconv.Itoa(800000 + os.Getpid()%99999)
	// Stands in for a monitor: carries the monitor marker, has a child
	// without any marker, in the monitor's own session and group.
	mon := exec.Command("bash", "-c", "env -i sleep "+tag+" & wait")
	mon.Env = append(os.Environ(), monitorEnv+"="+id)
	mon.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { mon.Wait(); close(waited) }()
	child := func() int {
		for _, pid := range childrenOf(mon.Process.Pid) {
			if cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); string(cl) == "sleep\x00"+tag+"\x00" {
				return pid
			}
		}
		return 0
	}
	waitFor(t, "the unmarked child", 5*time.Second, func() bool { return child() != 0 })
	pid := child()
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		_ = mon.Process.Kill()
		<-waited
	})

	newTestManager(t, Config{StateDir: dir})
	if processExists(pid) {
		t.Errorf("the unmarked child %d of an unrecorded run's monitor survived the start-up sweep", pid)
	}
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Error("the monitor of an unrecorded run survived the start-up sweep")
	}
}

// childrenOf lists the live children of pid.
func childrenOf(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := procfs.ReadStat(n); err == nil && st.PPID == pid && st.State != 'Z' {
			out = append(out, n)
		}
	}
	return out
}
