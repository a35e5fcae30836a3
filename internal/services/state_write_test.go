package services

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
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

	// Exposure's key, written by its own writer, is kept by every update.
	if err := (statefile.ExposedPort{Dir: dir}).Save(3000); err != nil {
		t.Fatal(err)
	}
	m := open()
	m.Close()
	before := stamp()

	m = open()
	defer m.Close()
	if got := stamp(); got != before {
		t.Errorf("state.json after New with nothing to change = %+v, want unchanged %+v", got, before)
	}
	if _, err := m.Start(t.Context(), apitype.StartServiceRequest{Name: "web", Command: "sleep 300"}); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background(), "web")
	if got := stamp(); got == before {
		t.Errorf("state.json after a start is still %+v, want a new file", got)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"exposedPort": 3000`) || !strings.Contains(string(b), `"web"`) {
		t.Errorf("state.json = %s, want the service and exposedPort 3000 kept", b)
	}
	if p, err := (statefile.ExposedPort{Dir: dir}).Load(); err != nil || p == nil || *p != 3000 {
		t.Errorf("exposed port after the manager's writes = %v, %v; want 3000", p, err)
	}
}
