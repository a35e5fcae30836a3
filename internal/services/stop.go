package services

import (
	"context"
	"fmt"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// Stop stops a service and everything it started; it returns once nothing of
// it is left. The error matches ErrNotFound for a name never started.
func (m *Manager) Stop(ctx context.Context, name string) error {
	if ValidateName(name) != nil {
		return notFound(name)
	}
	defer m.lockName(name)()
	return m.stopLocked(ctx, name)
}

func (m *Manager) stopLocked(ctx context.Context, name string) error {
	// A caller that goes away must not leave a half-stopped service behind.
	ctx = context.WithoutCancel(ctx)
	m.refresh()
	r, ok := m.record(name)
	if !ok {
		return notFound(name)
	}
	in := m.current(name)
	if in != nil {
		in.stopping.Store(true)
		in.cancel()
	}
	active := r.Status == apitype.StatusRunning || r.NextRestartAt != nil
	if active {
		// Persist the intent first, so a process sharing the state does not
		// take the exit for a crash and restart the service.
		_ = m.update(func(st *stateFile) error {
			if x := st.Services[name]; x != nil && x.Instance == r.Instance {
				x.StopRequested = x.Instance
			}
			return nil
		})
	}
	sig, grace := r.spec().stopSettings(m.cfg.StopTimeout)
	kerr := killTree(ctx, r.target(), sig, grace)
	// Wait for the monitor, so the log is complete and the exit handled.
	wait := time.NewTimer(grace + 5*time.Second)
	defer wait.Stop()
	if in != nil && in.id == r.Instance {
		select {
		case <-in.gone:
		case <-wait.C:
		case <-ctx.Done():
		case <-m.ctx.Done():
		}
	} else {
		for alive(r.MonitorPID, r.MonitorStartTime) {
			select {
			case <-wait.C:
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
				continue
			}
			break
		}
	}
	now := m.now().UnixMilli()
	err := m.update(func(st *stateFile) error {
		x := st.Services[name]
		if x == nil || x.Instance != r.Instance {
			return nil
		}
		if active || x.Status == apitype.StatusRunning {
			x.Status = apitype.StatusStopped
			x.StoppedAt = &now
			x.Reason = ""
		}
		x.Ready = false
		x.NextRestartAt, x.RestartClaimed = nil, ""
		x.StopRequested = x.Instance
		return nil
	})
	if active {
		m.emit(apitype.Event{Type: apitype.EventStopped, Service: name})
	}
	if kerr != nil {
		return fmt.Errorf("stop service %q: %w", name, kerr)
	}
	if err != nil {
		return fmt.Errorf("stop service %q: %w", name, err)
	}
	return nil
}
