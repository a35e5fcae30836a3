package services

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// watch follows one run from start to its end, then applies the restart policy.
func (m *Manager) watch(in *instance) {
	defer m.wg.Done()
	code, known, monitorDied, ok := m.waitExit(in)
	if !ok {
		return
	}
	if monitorDied {
		// Nothing reaps, logs or cleans up after the run any more: stop all
		// of it before its exit is recorded, so a restart never runs next to
		// what is left of it.
		reason := "the service's monitor died; stopped what was left of the run"
		in.failReason.CompareAndSwap(nil, &reason)
		t := in.t
		t.monitor, t.monStart = 0, 0
		sig, grace := in.spec.stopSettings(m.cfg.StopTimeout)
		if in.stopping.Load() {
			sig, grace = syscall.SIGKILL, 0
		}
		if err := killTree(context.WithoutCancel(in.ctx), t, sig, grace); err != nil {
			m.log.Error("stop the run of a dead monitor", "service", in.name, "err", err)
		}
		m.log.Warn("service monitor died; stopped the run", "service", in.name, "instance", in.id)
	}
	close(in.exited)
	claimed := m.recordExit(in, code, known)
	if !m.waitGone(in) {
		return
	}
	close(in.gone)
	os.Remove(m.exitFile(in.id))
	if claimed {
		m.afterExit(in, code, known)
	}
}

// waitExit returns the main process's exit code; ok is false when the
// manager closes first. monitorDied is true when the monitor ended without
// reporting the exit (killed), whatever of the run may still be running.
func (m *Manager) waitExit(in *instance) (code int, known, monitorDied, ok bool) {
	if in.status != nil {
		for {
			msg, err := readMonitorMsg(in.br)
			if err != nil {
				in.status.Close()
				if m.ctx.Err() != nil {
					return 0, false, false, false
				}
				code, known := m.readExitFile(in.id)
				return code, known, !known, true
			}
			if msg.Type == msgExited && msg.Code != nil {
				in.status.Close() // the monitor has nothing more to say
				return *msg.Code, true, false, true
			}
		}
	}
	tick := time.NewTicker(m.cfg.PollInterval)
	defer tick.Stop()
	for {
		if code, known := m.readExitFile(in.id); known {
			return code, true, false, true
		}
		// A record without a monitor (written by an older sidecar) ends with its process.
		legacy := in.t.monitor == 0
		if !alive(in.t.monitor, in.t.monStart) && (!legacy || !alive(in.t.pgid, in.t.pgidStart)) {
			code, known := m.readExitFile(in.id)
			return code, known, !known && !legacy, true
		}
		select {
		case <-m.ctx.Done():
			return 0, false, false, false
		case <-tick.C:
		}
	}
}

// waitGone waits for the monitor to end, reaping it when it is our child.
func (m *Manager) waitGone(in *instance) bool {
	delay := 5 * time.Millisecond
	maxDelay := m.cfg.PollInterval
	if in.cmd != nil {
		maxDelay = 50 * time.Millisecond
	}
	for {
		if in.cmd != nil {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(in.cmd.Process.Pid, &ws, syscall.WNOHANG, nil)
			if pid == in.cmd.Process.Pid || errors.Is(err, syscall.ECHILD) {
				_ = in.cmd.Process.Release()
				return true
			}
		} else if !alive(in.t.monitor, in.t.monStart) {
			return true
		}
		select {
		case <-m.ctx.Done():
			return false
		case <-time.After(delay):
		}
		delay = min(delay*2, maxDelay)
	}
}

func (m *Manager) readExitFile(id string) (int, bool) {
	b, err := os.ReadFile(m.exitFile(id))
	if err != nil {
		return 0, false
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return code, err == nil
}

// recordExit writes the exit of in into the state and emits "exited". It
// reports whether this process claimed the exit (and so owns the restart).
func (m *Manager) recordExit(in *instance, code int, known bool) bool {
	claimed := false
	now := m.now()
	_ = m.update(func(st *stateFile) error {
		r := st.Services[in.name]
		if r == nil || r.Instance != in.id || r.ExitedInstance == in.id {
			return nil
		}
		r.ExitedInstance = in.id
		if r.StopRequested == in.id || in.stopping.Load() {
			return nil
		}
		claimed = true
		applyExit(r, code, known, in.failReason.Load(), now)
		return nil
	})
	if claimed {
		ev := apitype.Event{Type: apitype.EventExited, Service: in.name}
		if known {
			ev.ExitCode = &code
		}
		if p := in.failReason.Load(); p != nil {
			ev.Reason = *p
		}
		m.emit(ev)
		m.log.Info("service exited", "service", in.name, "exit_code", code, "known", known)
	}
	return claimed
}

// applyExit sets the status of r after its main process ended: stopped on
// exit 0, error otherwise or when a readiness probe failed.
func applyExit(r *record, code int, known bool, reason *string, now time.Time) {
	at := now.UnixMilli()
	r.LastExitAt = &at
	r.Ready = false
	r.Status = apitype.StatusStopped
	r.ExitCode = nil
	if known {
		c := code
		r.ExitCode = &c
		if code != 0 {
			r.Status = apitype.StatusError
		}
	} else {
		r.Reason = "exited while no sidecar was watching; exit code unknown"
	}
	if reason != nil {
		r.Reason = *reason
		r.Status = apitype.StatusError
	}
}

// decide applies the restart policy of r to an exit.
func (m *Manager) decide(r *record, code int, known bool, ranFor time.Duration) (delay time.Duration, restart bool, giveUp string) {
	switch r.Restart {
	case apitype.RestartAlways:
	case apitype.RestartOnFailure:
		if known && code == 0 && r.Reason == "" {
			return 0, false, ""
		}
	default:
		return 0, false, ""
	}
	limit := 5
	if r.MaxRestarts != nil {
		limit = *r.MaxRestarts
	}
	n := r.Consecutive
	if ranFor >= m.cfg.BackoffReset {
		n = 0
	}
	if n >= limit {
		return 0, false, fmt.Sprintf("gave up after %d restarts", n)
	}
	delay = m.cfg.BackoffBase
	for i := 0; i < n && delay < m.cfg.BackoffMax; i++ {
		delay *= 2
	}
	return min(delay, m.cfg.BackoffMax), true, ""
}

// afterExit schedules a restart when the policy asks for one.
func (m *Manager) afterExit(in *instance, code int, known bool) {
	unlock := m.lockName(in.name)
	if m.current(in.name) != in || in.stopping.Load() {
		unlock()
		return
	}
	now := m.now()
	var delay time.Duration
	var restart bool
	var at int64
	_ = m.update(func(st *stateFile) error {
		r := st.Services[in.name]
		if r == nil || r.Instance != in.id || r.StopRequested == in.id {
			return nil
		}
		var giveUp string
		delay, restart, giveUp = m.decide(r, code, known, now.Sub(in.startedAt))
		if giveUp != "" {
			r.Status = apitype.StatusError
			if r.Reason != "" {
				r.Reason += "; "
			}
			r.Reason += giveUp
		}
		if !restart {
			return nil
		}
		if now.Sub(in.startedAt) >= m.cfg.BackoffReset {
			r.Consecutive = 0
		}
		r.Consecutive++
		r.Restarts++
		at = now.Add(delay).UnixMilli()
		r.NextRestartAt = &at
		r.Status = apitype.StatusError
		return nil
	})
	unlock()
	if !restart {
		return
	}
	m.emit(apitype.Event{Type: apitype.EventRestarting, Service: in.name, Time: now.UnixMilli(), NextRestartAt: &at})
	m.log.Info("service restarting", "service", in.name, "delay", delay)
	m.relaunchAfter(in, delay)
}

// relaunchAfter starts the run's service again after delay unless it is stopped first.
func (m *Manager) relaunchAfter(in *instance, delay time.Duration) {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-in.ctx.Done():
		return
	case <-m.ctx.Done():
		return
	}
	defer m.lockName(in.name)()
	if m.current(in.name) != in || in.stopping.Load() {
		return
	}
	// Claim the restart under the state lock: another process sharing the
	// state may have scheduled the same one.
	var r record
	claimed := false
	_ = m.update(func(st *stateFile) error {
		x := st.Services[in.name]
		if x != nil && x.Instance == in.id && x.NextRestartAt != nil && x.StopRequested != in.id {
			x.NextRestartAt = nil
			r, claimed = *x, true
		}
		return nil
	})
	if !claimed {
		return
	}
	sp, err := r.respawnSpec()
	if err == nil {
		err = checkCwd(sp.Cwd)
	}
	if err == nil {
		_, err = m.launch(m.ctx, sp, r.Restarts, r.Consecutive)
	}
	if err != nil {
		m.log.Warn("restart service", "service", in.name, "err", err)
		msg := err.Error()
		_ = m.update(func(st *stateFile) error {
			if x := st.Services[in.name]; x != nil && x.Instance == in.id {
				x.Status = apitype.StatusError
				x.Reason = "restart: " + msg
			}
			return nil
		})
	}
}
