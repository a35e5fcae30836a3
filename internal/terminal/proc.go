package terminal

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// sessionMembers lists the live (not zombie) processes whose session id is sid.
func sessionMembers(sid int) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		st, err := procfs.ReadStat(pid) // an error: gone meanwhile
		if err != nil || st.Session != sid || st.State == 'Z' || st.State == 'X' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// signalSession sends sig to every live process of session sid and reports how
// many it found.
func signalSession(sid int, sig syscall.Signal) int {
	pids := sessionMembers(sid)
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			continue
		}
	}
	return len(pids)
}

// killSession ends every process of session sid: SIGHUP, up to grace for them
// to leave, then SIGKILL until none is left (bounded). A process that started
// its own session (setsid) is out of reach by design, like a daemon.
func killSession(sid int, grace time.Duration) {
	if signalSession(sid, syscall.SIGHUP) == 0 {
		return
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if len(sessionMembers(sid)) == 0 {
			return
		}
	}
	for range 100 {
		if signalSession(sid, syscall.SIGKILL) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
