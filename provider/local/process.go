package local

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// markerEnv is set on every process of a local sandbox and inherited by their
// children (services started by sandbox-mcp included), so Terminate finds them all,
// even those in process groups of their own.
const markerEnv = "PROLIFERATE_LOCAL_SANDBOX_ID"

// groupAlive reports whether process group pgid still has a running member. Zombies
// do not count: an orphan waits for init to reap it, which in a container can take
// a while, and it runs nothing.
func groupAlive(pgid int) bool {
	if pgid <= 0 {
		return false
	}
	if err := syscall.Kill(-pgid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true // no /proc: signal 0 is all we know
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		state, pgrp, ok := procStat(e.Name())
		if ok && pgrp == pgid && state != 'Z' && state != 'X' {
			return true
		}
	}
	return false
}

// procStat reads the state and process group of /proc/<pid>/stat. The command name
// is in parentheses and may hold spaces, so fields are counted after the last ')'.
func procStat(pid string) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	g, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], g, true
}

// markedPIDs lists the processes whose environment carries the sandbox's marker.
// Where /proc is missing it returns nil and only recorded groups are signalled.
func markedPIDs(sandboxID string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(markerEnv + "=" + sandboxID)
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// killSandboxProcesses sends SIGTERM to every recorded process group and to the group
// of every marked process, waits up to grace for them to go, then SIGKILLs what is
// left. It returns when nothing of the sandbox is left or after a second pass of
// SIGKILL.
func killSandboxProcesses(sandboxID string, pgids []int, grace time.Duration) {
	signalAll := func(sig syscall.Signal) bool {
		any := false
		for _, g := range pgids {
			if groupAlive(g) {
				_ = syscall.Kill(-g, sig)
				any = true
			}
		}
		for _, pid := range markedPIDs(sandboxID) {
			if g, err := syscall.Getpgid(pid); err == nil && g != syscall.Getpgrp() {
				_ = syscall.Kill(-g, sig)
			}
			_ = syscall.Kill(pid, sig)
			any = true
		}
		return any
	}
	if !signalAll(syscall.SIGTERM) {
		return
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !anyAlive(sandboxID, pgids) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	for range 50 {
		if !signalAll(syscall.SIGKILL) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func anyAlive(sandboxID string, pgids []int) bool {
	for _, g := range pgids {
		if groupAlive(g) {
			return true
		}
	}
	return len(markedPIDs(sandboxID)) > 0
}
