package services

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// List returns every service in the order its name was first started.
func (m *Manager) List() []apitype.ServiceInfo {
	m.refresh()
	m.mu.RLock()
	recs := make([]*record, 0, len(m.st.Services))
	for _, r := range m.st.Services {
		recs = append(recs, r)
	}
	m.mu.RUnlock()
	slices.SortFunc(recs, func(a, b *record) int {
		if a.Order != b.Order {
			return int(a.Order - b.Order)
		}
		return strings.Compare(a.Name, b.Name)
	})
	out := make([]apitype.ServiceInfo, len(recs))
	for i, r := range recs {
		out[i] = r.ServiceInfo
	}
	return out
}

// ListVersion returns a number that changes whenever what List returns may
// have changed, in this process or in another one sharing the state dir (it
// re-reads state.json first when that was replaced). A caller may keep what it
// derived from List while ListVersion stays the same, provided it read the
// version before calling List.
func (m *Manager) ListVersion() uint64 {
	m.refresh()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.gen
}

// Get returns one service; the error matches ErrNotFound for a name never started.
func (m *Manager) Get(name string) (apitype.ServiceInfo, error) {
	if ValidateName(name) != nil {
		return apitype.ServiceInfo{}, notFound(name)
	}
	m.refresh()
	r, ok := m.record(name)
	if !ok {
		return apitype.ServiceInfo{}, notFound(name)
	}
	return r.ServiceInfo, nil
}

// LogPath returns <StateDir>/logs/<name>.log. The error matches ErrInvalid
// for a bad name and ErrNotFound when the service is unknown and has no log.
func (m *Manager) LogPath(name string) (string, error) {
	if err := ValidateName(name); err != nil {
		return "", err
	}
	p := filepath.Join(m.logDir, name+".log")
	if _, ok := m.record(name); ok {
		return p, nil
	}
	if _, err := os.Stat(p); err != nil {
		return "", userError(ErrNotFound, rules.NoLogs(name))
	}
	return p, nil
}
