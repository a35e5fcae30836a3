package terminal

import "time"

// Shedding: a v2 session outlives its connection for the grace period (5
// minutes by default), so MaxSessions abandoned sessions used to lock every
// new terminal out until their grace ran out (issue 28: 64 abandoned v2
// terminals). At the cap, Reserve now ends the session that has gone
// without a viewer the longest; its shell is killed as at the end of its
// grace, and a client that comes back for it gets a new session. Sessions
// with a viewer are never shed.

const (
	// maxShedAttempts bounds Reserve's loop: a shed session's room can be
	// taken by a concurrent Reserve before this one gets it.
	maxShedAttempts = 3
	// shedWait bounds the wait for a shed session's shell to be gone
	// (SIGHUP, KillGrace, SIGKILL, then its jobs).
	shedWait = 10 * time.Second
)

// longestDetachedLocked is the v2 session with no viewer whose last viewer
// left first, or nil. m.mu is held; it takes each session's lock (never the
// other way round).
func (m *Manager) longestDetachedLocked() *session {
	var victim *session
	var since time.Time
	for _, s := range m.sessions {
		s.mu.Lock()
		d := s.detachedAt
		ok := s.v2 && len(s.viewers) == 0 && !d.IsZero()
		s.mu.Unlock()
		if !ok || (victim != nil && !d.Before(since)) {
			continue
		}
		select {
		case <-s.killed:
			continue // already ending: its room comes back by itself
		default:
		}
		victim, since = s, d
	}
	return victim
}

// shed ends s unless a viewer attached since it was chosen, and waits until
// its room is free; it reports whether it freed the room.
func (m *Manager) shed(s *session) bool {
	s.mu.Lock()
	detached := len(s.viewers) == 0
	if detached {
		s.kill("shed: the session cap was reached and this session had no viewer the longest")
	}
	s.mu.Unlock()
	if !detached {
		return true // look again: another session may be detached
	}
	select {
	case <-s.done:
		return true
	case <-time.After(shedWait):
		return false
	}
}
