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
	next := m.recordExit(in, code, known)
	if !m.waitGone(in) {
		return
	}
	close(in.gone)
	os.Remove(m.exitFile(in.id))
	if next != nil {
		m.afterExit(in, *next)
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

// recordExit writes the exit of in into the state together with what the
// restart policy makes of it, and emits "exited" (and "restarting"). One
// update takes the record from running to its next state, waiting to restart
// or ended: a reader never sees an exit whose restart is not decided yet,
// which would read as a service that gave up. It returns when the restart is
// due, or nil when this process did not claim the exit or no restart follows.
func (m *Manager) recordExit(in *instance, code int, known bool) *int64 {
	claimed := false
	var next *int64
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
		next = m.applyPolicy(r, code, known, now.Sub(in.startedAt), now)
		return nil
	})
	if !claimed {
		return nil
	}
	// Both events carry the time of the one update that recorded them.
	ev := apitype.Event{Type: apitype.EventExited, Service: in.name, Time: now.UnixMilli()}
	if known {
		ev.ExitCode = &code
	}
	if p := in.failReason.Load(); p != nil {
		ev.Reason = *p
	}
	m.emit(ev)
	m.log.Info("service exited", "service", in.name, "exit_code", code, "known", known)
	if next != nil {
		m.emit(apitype.Event{Type: apitype.EventRestarting, Service: in.name, Time: now.UnixMilli(), NextRestartAt: next})
		m.log.Info("service restarting", "service", in.name, "delay", time.UnixMilli(*next).Sub(now))
	}
	return next
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

// applyPolicy applies the restart policy of r to the exit applyExit just
// recorded: it either schedules a restart (error with NextRestartAt, the
// counters raised) or, past maxRestarts, records that the service gave up.
// It returns NextRestartAt, or nil when no restart follows.
func (m *Manager) applyPolicy(r *record, code int, known bool, ranFor time.Duration, now time.Time) *int64 {
	delay, restart, giveUp := m.decide(r, code, known, ranFor)
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
	if ranFor >= m.cfg.BackoffReset {
		r.Consecutive = 0
	}
	r.Consecutive++
	r.Restarts++
	at := now.Add(delay).UnixMilli()
	r.NextRestartAt = &at
	r.RestartClaimed = ""
	r.Status = apitype.StatusError
	return &at
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

// afterExit relaunches the run's service at next (epoch ms), the time
// recordExit scheduled, once nothing of the run is left, unless the run was
// stopped or replaced meanwhile.
func (m *Manager) afterExit(in *instance, next int64) {
	unlock := m.lockName(in.name)
	current := m.current(in.name) == in && !in.stopping.Load()
	unlock()
	if !current {
		return
	}
	m.relaunchAfter(in, max(time.UnixMilli(next).Sub(m.now()), 0))
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
	// Held from the claim until the new run is recorded, so a claim found
	// while New holds it exclusively belongs to a launch that never finished.
	unlockLaunch, err := m.lockLaunch(false)
	if err != nil {
		m.log.Warn("restart service", "service", in.name, "err", err)
		return
	}
	defer unlockLaunch()
	// Claim the restart under the state lock: another process sharing the
	// state may have scheduled the same one. The record keeps NextRestartAt
	// until the new run replaces it, so it reads as waiting to restart, not
	// as given up, while the run starts.
	var r record
	claimed := false
	_ = m.update(func(st *stateFile) error {
		x := st.Services[in.name]
		if x != nil && x.Instance == in.id && x.NextRestartAt != nil && x.StopRequested != in.id && x.RestartClaimed == "" {
			x.RestartClaimed = in.id
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
				x.NextRestartAt, x.RestartClaimed = nil, ""
			}
			return nil
		})
	}
}
