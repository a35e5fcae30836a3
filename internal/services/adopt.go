package services

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// adopt takes over the runs recorded in the state file: live ones are
// watched again, ended ones get their exit recorded, pending restarts are
// scheduled. New calls it holding launch.lock exclusively.
func (m *Manager) adopt() error {
	type pending struct {
		in    *instance
		delay time.Duration
	}
	var watch []*instance
	var restarts []pending
	var events []apitype.Event
	now := m.now()
	err := m.update(func(st *stateFile) error {
		for name, r := range st.Services {
			waiting := r.Status == apitype.StatusError && r.NextRestartAt != nil
			if r.Status != apitype.StatusRunning && !waiting {
				continue
			}
			if r.StartTime == 0 && r.PID > 0 && legacyMatch(r.PID, r.Command) {
				if st, err := procfs.ReadStat(r.PID); err == nil {
					r.StartTime = st.Start
					if st.PGID == r.PID {
						r.PGID = r.PID
					}
				}
			}
			in := m.newInstance(name, r.Instance, r.spec(), r.target(), time.UnixMilli(r.StartedAt))
			if waiting {
				// New holds launch.lock exclusively: a claim found now is
				// that of a launch that never finished (its process died).
				r.RestartClaimed = ""
				close(in.exited)
				close(in.gone)
				restarts = append(restarts, pending{in: in, delay: time.UnixMilli(*r.NextRestartAt).Sub(now)})
				continue
			}
			if alive(r.MonitorPID, r.MonitorStartTime) || alive(r.PID, r.StartTime) {
				watch = append(watch, in)
				continue
			}
			code, known := m.readExitFile(r.Instance)
			if r.Instance == "" || r.ExitedInstance == r.Instance {
				known = false
			}
			r.ExitedInstance = r.Instance
			applyExit(r, code, known, nil, now)
			next := m.applyPolicy(r, code, known, now.Sub(time.UnixMilli(r.StartedAt)), now)
			close(in.exited)
			close(in.gone)
			if next != nil {
				events = append(events, apitype.Event{Type: apitype.EventRestarting, Service: name, Time: now.UnixMilli(), NextRestartAt: next})
				restarts = append(restarts, pending{in: in, delay: time.UnixMilli(*next).Sub(now)})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("services: load state: %w", err)
	}
	for _, in := range watch {
		m.setCurrent(in)
		m.log.Info("service re-adopted", "service", in.name, "pid", in.t.pgid)
		m.wg.Add(1)
		go m.watch(in)
	}
	for _, p := range restarts {
		m.setCurrent(p.in)
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.relaunchAfter(p.in, max(p.delay, 0))
		}()
	}
	for _, ev := range events {
		m.emit(ev)
	}
	return nil
}

// legacyMatch reports whether pid runs `bash -c command`: the check for a
// state entry written without a start time.
func legacyMatch(pid int, command string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	return len(args) == 3 && filepath.Base(args[0]) == "bash" && args[1] == "-c" && args[2] == command
}

// syncLoop follows runs started by other processes sharing the state dir
// (the MCP mode and the API server), so their exits are recorded and their
// restart policies applied even after the process that started them is gone.
func (m *Manager) syncLoop() {
	defer m.wg.Done()
	tick := time.NewTicker(m.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-tick.C:
		}
		m.flushPending()
		m.refresh()
		m.mu.RLock()
		var foreign []record
		for _, r := range m.st.Services {
			if r.Status == apitype.StatusRunning && r.Instance != "" && r.ExitedInstance != r.Instance {
				foreign = append(foreign, *r)
			}
		}
		m.mu.RUnlock()
		for _, r := range foreign {
			m.adoptForeign(r)
		}
	}
}

// adoptForeign watches r's run unless this process already does. A name
// being started or stopped here is skipped; the next round sees it again.
func (m *Manager) adoptForeign(r record) {
	m.namesMu.Lock()
	mu, ok := m.names[r.Name]
	if !ok {
		mu = &sync.Mutex{}
		m.names[r.Name] = mu
	}
	m.namesMu.Unlock()
	if !mu.TryLock() {
		return
	}
	defer mu.Unlock()
	if in := m.current(r.Name); in != nil && in.id == r.Instance {
		return
	}
	if !alive(r.MonitorPID, r.MonitorStartTime) && !alive(r.PID, r.StartTime) {
		if _, known := m.readExitFile(r.Instance); !known {
			return // not started yet or already handled elsewhere; adopt() covers restarts
		}
	}
	in := m.newInstance(r.Name, r.Instance, r.spec(), r.target(), time.UnixMilli(r.StartedAt))
	m.setCurrent(in)
	m.log.Info("service adopted from another process", "service", r.Name, "pid", r.PID)
	m.wg.Add(1)
	go m.watch(in)
}
