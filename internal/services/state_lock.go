package services

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
)

// lockName serializes start, stop and restart of one name.
func (m *Manager) lockName(name string) func() {
	m.namesMu.Lock()
	mu, ok := m.names[name]
	if !ok {
		mu = &sync.Mutex{}
		m.names[name] = mu
	}
	m.namesMu.Unlock()
	mu.Lock()
	return mu.Unlock
}

// update applies fn to the freshest state under the cross-process lock and
// writes the result atomically. When the write fails (disk full, state dir
// read-only) the new state is kept in memory, so what callers see follows
// what actually happened, and it is written once writing works again; update
// then succeeds all the same. Use updateDurable when the caller must not go
// on unless the change is on disk.
func (m *Manager) update(fn func(st *stateFile) error) error {
	return m.updateState(false, fn)
}

// updateDurable is update that fails, and changes nothing, unless the new
// state was written to disk.
func (m *Manager) updateDurable(fn func(st *stateFile) error) error {
	return m.updateState(true, fn)
}

func (m *Manager) updateState(durable bool, fn func(st *stateFile) error) error {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	unlock, err := m.lockState()
	if err != nil {
		if durable {
			return err
		}
		// Without the lock no other process can be kept in step; this
		// process's own view still follows what happened.
		m.log.Warn("state lock unavailable; keeping the change in memory", "err", err)
		unlock = func() {}
	}
	defer unlock()
	st, stamp, raw, err := m.readForUpdate()
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	if err := fn(st); err != nil {
		return err
	}
	b, err := encodeState(st)
	if err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	// The same content is not written again (nor fsynced): a restarted
	// sidecar that finds every service as recorded writes nothing.
	if raw == nil || !bytes.Equal(b, raw) {
		var werr error
		if stamp, werr = writeState(m.statePath, b); werr != nil {
			if durable {
				return fmt.Errorf("save state: %w", werr)
			}
			m.mu.Lock()
			if !m.pending {
				m.log.Error("cannot write the state file; keeping the state in memory and retrying", "err", werr)
			}
			m.st, m.pending = st.clone(), true
			m.gen++
			m.mu.Unlock()
			return nil
		}
	}
	m.mu.Lock()
	if m.pending {
		m.log.Info("state file written again")
	}
	m.st, m.stamp, m.pending = st.clone(), stamp, false
	m.gen++
	m.mu.Unlock()
	return nil
}

// lockState takes the cross-process state lock, recreating the state dir
// when it was deleted.
func (m *Manager) lockState() (func(), error) {
	unlock, err := statefile.Lock(m.cfg.StateDir)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return unlock, err
	}
	if derr := m.makeDirs(); derr != nil {
		return nil, fmt.Errorf("%w (recreate state dir: %w)", err, derr)
	}
	m.log.Warn("state dir was deleted; created it again", "dir", m.cfg.StateDir)
	return statefile.Lock(m.cfg.StateDir)
}

// readForUpdate returns the state an update starts from: the file, unless
// this process holds changes it could not write or the file was lost, in
// which case the state in memory is the truth. A file that cannot be used
// (corrupt, not a regular file, unreadable) is moved aside.
func (m *Manager) readForUpdate() (*stateFile, fileStamp, []byte, error) {
	m.mu.RLock()
	pending, seen := m.pending, m.stamp != (fileStamp{})
	m.mu.RUnlock()
	// The state in memory is copied only when it is what the update starts
	// from, not on every update.
	mem := func() *stateFile {
		m.mu.RLock()
		defer m.mu.RUnlock()
		return m.st.clone()
	}
	if pending {
		return mem(), fileStamp{}, nil, nil
	}
	st, stamp, raw, err := readStateRaw(m.statePath)
	if errors.Is(err, errCorrupt) {
		dst, qerr := quarantine(m.statePath, m.now())
		m.log.Error("state file is unusable; moved aside", "err", err, "moved_to", dst, "move_err", qerr)
		return mem(), fileStamp{}, nil, nil
	}
	if err != nil {
		return nil, fileStamp{}, nil, err
	}
	if raw == nil && seen {
		m.log.Warn("state file disappeared; writing it again from memory", "path", m.statePath)
		return mem(), fileStamp{}, nil, nil
	}
	for _, p := range sanitizeState(st) {
		m.log.Warn("state file entry refused", "problem", p)
	}
	return st, stamp, raw, nil
}

// refresh re-reads the state file when another process replaced it.
func (m *Manager) refresh() {
	stamp, err := statStamp(m.statePath)
	if err != nil {
		return
	}
	m.mu.RLock()
	same := stamp == m.stamp || m.pending
	m.mu.RUnlock()
	if same {
		return
	}
	st, stamp, err := readState(m.statePath)
	if errors.Is(err, errCorrupt) {
		// Replaced by something unusable while running: move it aside and
		// write the state this process knows.
		_ = m.update(func(*stateFile) error { return nil })
		return
	}
	if err != nil {
		m.log.Warn("read state file", "err", err)
		return
	}
	sanitizeState(st)
	m.mu.Lock()
	if !m.pending {
		m.st, m.stamp = st, stamp
		m.gen++
	}
	m.mu.Unlock()
}

// flushPending writes the state kept in memory after a failed write.
func (m *Manager) flushPending() {
	m.mu.RLock()
	pending := m.pending
	m.mu.RUnlock()
	if pending {
		_ = m.update(func(*stateFile) error { return nil })
	}
}

func (m *Manager) record(name string) (record, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	r, ok := m.st.Services[name]
	if !ok {
		return record{}, false
	}
	return *r, true
}
