package ports

import (
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// TestPort: a lookup of one port finds its listener and owner afresh, with
// the run marker of the owner's environment, also when the owner is searched
// first; a port nobody listens on has no listener.
func TestPort(t *testing.T) {
	// A long cache proves Port does not use it.
	s, err := New(Options{Logger: discard, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	cmd, port := testutil.HTTPServer(t, ServiceEnv+"=web", InstanceEnv+"=run-1")
	// Through netlink sock_diag where the kernel has it, then through /proc/net/tcp.
	for _, noDiag := range []bool{false, true} {
		s.noDiag.Store(noDiag)
		for _, prefer := range [][]int{nil, {cmd.Process.Pid}, {1 << 22, cmd.Process.Pid}} {
			ls, err := s.Port(t.Context(), port, prefer...)
			if err != nil {
				t.Fatalf("Port(%d, %v) (noDiag %v): %v", port, prefer, noDiag, err)
			}
			if len(ls) != 1 || ls[0].PID != cmd.Process.Pid || ls[0].Instance != "run-1" || ls[0].Service != "web" || ls[0].Port != port {
				t.Errorf("Port(%d, %v) (noDiag %v) = %+v, want one listener of pid %d, instance run-1", port, prefer, noDiag, ls, cmd.Process.Pid)
			}
		}
	}
	s.noDiag.Store(false)
	cmd.Process.Kill()
	cmd.Wait()
	ls, err := s.Port(t.Context(), port)
	if err != nil || len(ls) != 0 {
		t.Errorf("Port(%d) after the listener ended = %+v, %v, want none", port, ls, err)
	}
}

// BenchmarkPort measures one readiness lookup: with the owner searched first
// (the probe of a service's own port) and with a full process walk.
func BenchmarkPort(b *testing.B) {
	s, err := New(Options{Logger: discard, MaxAge: -1})
	if err != nil {
		b.Fatal(err)
	}
	cmd, port := testutil.HTTPServer(b)
	pid := cmd.Process.Pid
	b.Run("owner first", func(b *testing.B) {
		for b.Loop() {
			if ls, _ := s.Port(b.Context(), port, pid); len(ls) != 1 {
				b.Fatal("listener not found")
			}
		}
	})
	b.Run("full walk", func(b *testing.B) {
		for b.Loop() {
			if ls, _ := s.Port(b.Context(), port); len(ls) != 1 {
				b.Fatal("listener not found")
			}
		}
	})
}
