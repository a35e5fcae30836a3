package services

import (
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// subscriber is one receiver of events.
type subscriber struct {
	ch   chan apitype.Event
	once sync.Once
}

func (s *subscriber) close() { s.once.Do(func() { close(s.ch) }) }

// Subscribe returns a channel of service events and a function that
// unsubscribes. The channel is buffered; a subscriber that falls behind
// misses events, it never blocks the manager. The channel is closed on
// unsubscribe and on Close.
func (m *Manager) Subscribe() (<-chan apitype.Event, func()) {
	s := &subscriber{ch: make(chan apitype.Event, m.cfg.EventBuffer)}
	m.subMu.Lock()
	if m.ctx.Err() != nil {
		s.close()
	} else {
		m.subs[s] = struct{}{}
	}
	m.subMu.Unlock()
	return s.ch, func() {
		m.subMu.Lock()
		delete(m.subs, s)
		m.subMu.Unlock()
		s.close()
	}
}

func (m *Manager) emit(ev apitype.Event) {
	if ev.Time == 0 {
		ev.Time = m.now().UnixMilli()
	}
	m.subMu.Lock()
	defer m.subMu.Unlock()
	for s := range m.subs {
		select {
		case s.ch <- ev:
		default:
		}
	}
}

// Publish sends ev to the subscribers of Subscribe, for the events others
// put on the same stream (exposure's "exposed").
func (m *Manager) Publish(ev apitype.Event) { m.emit(ev) }
