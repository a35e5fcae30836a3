package services

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// statePrefix is the first 8 hex digits of the SHA-256 of the state dir's
// absolute path. Every instance id of the state dir starts with it, so every
// process of every run (and every monitor) carries a marker of the state dir
// it belongs to, recorded or not.
func statePrefix(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	sum := sha256.Sum256([]byte(dir))
	return hex.EncodeToString(sum[:4])
}

// lockLaunch takes <StateDir>/launch.lock: shared by every launch from the
// monitor's start until its ack (and by a restart from its claim), exclusive
// by New around the orphan sweep and adopt, which so never see a run that is
// being recorded.
func (m *Manager) lockLaunch(exclusive bool) (func(), error) {
	path := filepath.Join(m.cfg.StateDir, "launch.lock")
	// lockedfile write-locks a file opened for writing, read-locks one opened
	// read-only.
	flag := os.O_RDONLY | os.O_CREATE
	if exclusive {
		flag = os.O_RDWR | os.O_CREATE
	}
	f, err := lockedfile.OpenFile(path, flag, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		if derr := m.makeDirs(); derr == nil {
			f, err = lockedfile.OpenFile(path, flag, 0o644)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("lock launch: %w", err)
	}
	return func() { _ = f.Close() }, nil
}

// orphanProc is a process that carries an instance marker of this state dir.
type orphanProc struct {
	pid, ppid, pgid int
	start           uint64
	monitor         bool // carries monitorEnv: it is the run's monitor
	cmdline         string
}

// markedProcs lists the live processes (other than this one) whose
// environment carries an instance or monitor marker starting with prefix,
// by instance id.
func markedProcs(prefix string) map[string][]orphanProc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	inst := []byte(instanceEnv + "=" + prefix + "-")
	mon := []byte(monitorEnv + "=" + prefix + "-")
	out := map[string][]orphanProc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self || pid <= 1 {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, []byte(prefix+"-")) {
			continue
		}
		id, isMon := "", false
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			switch {
			case bytes.HasPrefix(kv, inst):
				id = string(kv[len(instanceEnv)+1:])
			case bytes.HasPrefix(kv, mon):
				id, isMon = string(kv[len(monitorEnv)+1:]), true
			}
		}
		if id == "" {
			continue
		}
		st, err := procfs.ReadStat(pid)
		if err != nil || st.State == 'Z' {
			continue
		}
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out[id] = append(out[id], orphanProc{pid: pid, ppid: st.PPID, pgid: st.PGID, start: st.Start, monitor: isMon,
			cmdline: strings.TrimSpace(string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '})))})
	}
	return out
}

// sweepGrace is how long swept processes get between SIGTERM and SIGKILL.
const sweepGrace = 500 * time.Millisecond

// sweepOrphans stops every process that carries an instance marker of this
// state dir while no running record claims its instance: the leftovers of a
// sidecar killed in the middle of a start, or of a run whose record was
// lost. It logs what it stopped.
// The caller holds launch.lock exclusively.
func (m *Manager) sweepOrphans() {
	st, _, err := readState(m.statePath)
	switch {
	case err == nil:
		sanitizeState(st)
	case errors.Is(err, errCorrupt):
		// Moved aside by adopt: none of its runs can be stopped through the API.
		st = newState()
	default:
		m.log.Warn("orphan sweep skipped", "err", err)
		return
	}
	claimed := map[string]bool{}
	for _, r := range st.Services {
		if r.Status == apitype.StatusRunning && r.Instance != "" {
			claimed[r.Instance] = true
		}
	}
	// First the monitors stop (SIGSTOP): a stopped monitor forks nothing
	// behind the sweep's back, and stays the child subreaper of what its run
	// left, so a process that cleared its environment (env -i) after its
	// group's leader died is still found, as its descendant. Each run is then
	// stopped with its monitor as the root of its tree, the monitor last.
	var wg sync.WaitGroup
	for id, procs := range markedProcs(m.prefix) {
		if claimed[id] {
			continue
		}
		t := target{instance: id}
		pids := make([]int, 0, len(procs))
		cmds := make([]string, 0, len(procs))
		var monitors []orphanProc
		for _, p := range procs {
			pids = append(pids, p.pid)
			cmds = append(cmds, p.cmdline)
			switch {
			case p.monitor:
				_ = syscall.Kill(p.pid, syscall.SIGSTOP)
				monitors = append(monitors, p)
			case p.pid == p.pgid:
				t.pgid, t.pgidStart = p.pid, p.start
			}
		}
		// A monitor's child between fork and exec carries the monitor's marker
		// too; the monitor is the one whose parent is not one of them.
		for _, p := range monitors {
			if !slices.ContainsFunc(monitors, func(q orphanProc) bool { return q.pid == p.ppid }) {
				t.monitor, t.monStart = p.pid, p.start
			}
		}
		m.log.Warn("stopping orphaned processes of an unrecorded run", "instance", id, "pids", pids, "commands", cmds)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if t.monitor != 0 {
				waitStopped(t.monitor, t.monStart, 2*time.Second)
			}
			if err := killTree(context.Background(), t, syscall.SIGTERM, sweepGrace); err != nil {
				m.log.Error("stop orphaned processes", "instance", id, "err", err)
			}
			for _, p := range monitors {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
			for _, p := range monitors {
				waitDead(p.pid, p.start, 2*time.Second)
			}
			os.Remove(m.exitFile(id))
		}()
	}
	wg.Wait()
}

// waitStopped polls until pid (started at start) is stopped or gone, at most d.
func waitStopped(pid int, start uint64, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		st, err := procfs.ReadStat(pid)
		if err != nil || st.Start != start || st.State == 'T' || st.State == 'Z' {
			return
		}
	}
}

// waitDead polls until pid (started at start) is gone or a zombie, at most d.
func waitDead(pid int, start uint64, d time.Duration) {
	for deadline := time.Now().Add(d); alive(pid, start) && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
}

// ProtectSidecar lowers the OOM score of the calling process (the API
// sidecar), so that under memory pressure the kernel kills a service, whose
// score the monitor raised, before the process that can stop and restart it.
// Lowering needs CAP_SYS_RESOURCE; without it the error says so and nothing changes.
func ProtectSidecar() error {
	return os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(sidecarOOMScoreAdj)), 0)
}
