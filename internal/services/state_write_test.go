package services

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnchangedStateIsNotRewritten: an update that changes nothing, such as
// loading the state at start-up, leaves state.json alone (same file, no fsync);
// a real change still replaces it.
func TestUnchangedStateIsNotRewritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	open := func() *Manager {
		m, err := New(Config{StateDir: dir, WorkspaceDir: t.TempDir()})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return m
	}
	stamp := func() fileStamp {
		t.Helper()
		st, err := statStamp(path)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}

	m := open()
	if err := m.SetExposedPort(3000); err != nil {
		t.Fatal(err)
	}
	m.Close()
	before := stamp()

	m = open()
	defer m.Close()
	if got := stamp(); got != before {
		t.Errorf("state.json after New with nothing to change = %+v, want unchanged %+v", got, before)
	}
	if err := m.SetExposedPort(3000); err != nil {
		t.Fatal(err)
	}
	if got := stamp(); got != before {
		t.Errorf("state.json after setting the same port = %+v, want unchanged %+v", got, before)
	}
	if p := m.ExposedPort(); p == nil || *p != 3000 {
		t.Errorf("ExposedPort() = %v, want 3000", p)
	}

	if err := m.SetExposedPort(3001); err != nil {
		t.Fatal(err)
	}
	if got := stamp(); got == before {
		t.Errorf("state.json after changing the port is still %+v, want a new file", got)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"exposedPort": 3001`) {
		t.Errorf("state.json = %s, want exposedPort 3001", b)
	}
}
