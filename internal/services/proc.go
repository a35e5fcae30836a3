package services

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// alive reports whether pid is a live (non-zombie) process started at start.
// A zero pid or start is never trusted.
func alive(pid int, start uint64) bool {
	if pid <= 0 || start == 0 {
		return false
	}
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z' && st.Start == start
}

// target identifies everything that belongs to one run of a service.
type target struct {
	pgid      int    // process group of `bash -c`, equal to its pid
	pgidStart uint64 // start time of the group leader as recorded
	instance  string // SANDBOX_MCP_SERVICE_INSTANCE of every process of the run
	monitor   int    // monitor pid; its children (adopted orphans) belong to the run
	monStart  uint64
}

// findProcs lists the live processes of t: members of its process group
// (unless the leader's pid was recycled), processes carrying its instance
// marker, and their descendants and the monitor's, wherever they moved.
// groupOK says whether signalling -pgid is safe.
func findProcs(t target) (pids []int, groupOK bool) {
	// Never a group of 1 or less (kill(-1) signals everything) nor our own.
	groupOK = t.pgid > 1 && t.pgid != syscall.Getpgrp()
	if groupOK {
		if st, err := procfs.ReadStat(t.pgid); err == nil && st.State != 'Z' && (t.pgidStart == 0 || st.Start != t.pgidStart) {
			// Another process owns the leader's pid: the group is not ours.
			groupOK = false
		}
	}
	monitor := 0
	if alive(t.monitor, t.monStart) {
		monitor = t.monitor
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, groupOK
	}
	self := os.Getpid()
	marker := []byte(instanceEnv + "=" + t.instance)
	parent := map[int]int{}
	in := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid == monitor {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || st.State == 'Z' {
			continue
		}
		parent[pid] = st.PPID
		if groupOK && st.PGID == t.pgid {
			in[pid] = true
			continue
		}
		if t.instance != "" && hasEnvEntry(pid, marker) {
			in[pid] = true
		}
	}
	for changed := true; changed; {
		changed = false
		for pid, pp := range parent {
			if !in[pid] && (in[pp] || (monitor != 0 && pp == monitor)) {
				in[pid] = true
				changed = true
			}
		}
	}
	for pid := range in {
		pids = append(pids, pid)
	}
	return pids, groupOK
}

// hasEnvEntry reports whether the initial environment of pid holds exactly entry.
func hasEnvEntry(pid int, entry []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		var e []byte
		if i < 0 {
			e, b = b, nil
		} else {
			e, b = b[:i], b[i+1:]
		}
		if bytes.Equal(e, entry) {
			return true
		}
	}
	return false
}

// signalProcs sends sig to the group (when safe) and to every listed process outside it.
// A stopped (SIGSTOP, Ctrl-Z) process also gets SIGCONT, so it can act on the signal.
func signalProcs(t target, pids []int, groupOK bool, sig syscall.Signal) {
	send := func(pid int) {
		if pid == 1 || pid == 0 || pid == -1 {
			return
		}
		_ = syscall.Kill(pid, sig)
		if sig != syscall.SIGKILL {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	if groupOK {
		send(-t.pgid)
	}
	for _, pid := range pids {
		if groupOK {
			if st, err := procfs.ReadStat(pid); err == nil && st.PGID == t.pgid {
				continue
			}
		}
		send(pid)
	}
}

// killTree stops everything of t: sig, then SIGKILL after grace, and returns
// once nothing of it is left (zombies waiting for their parent count as gone).
func killTree(ctx context.Context, t target, sig syscall.Signal, grace time.Duration) error {
	pids, groupOK := findProcs(t)
	if len(pids) == 0 {
		return nil
	}
	signalProcs(t, pids, groupOK, sig)
	if waitNoProcs(ctx, t, grace) {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for range 3 {
		pids, groupOK = findProcs(t)
		if len(pids) == 0 {
			return nil
		}
		signalProcs(t, pids, groupOK, syscall.SIGKILL)
		if waitNoProcs(ctx, t, 2*time.Second) {
			return nil
		}
	}
	pids, _ = findProcs(t)
	if len(pids) == 0 {
		return nil
	}
	return fmt.Errorf("kill processes %v: still alive after SIGKILL", pids)
}

// waitNoProcs polls until t has no process left or d has passed.
func waitNoProcs(ctx context.Context, t target, d time.Duration) bool {
	deadline := time.Now().Add(d)
	delay := 5 * time.Millisecond
	for {
		if pids, _ := findProcs(t); len(pids) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delay):
		}
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}
