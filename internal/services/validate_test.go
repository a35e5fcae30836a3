package services

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestStartBounds: every value out of bounds is refused as ErrInvalid naming
// its field, before anything is started or recorded.
func TestStartBounds(t *testing.T) {
	m := newTestManager(t, Config{})
	manyKeys := map[string]string{}
	for i := range rules.MaxEnvKeys + 1 {
		manyKeys[fmt.Sprintf("K%d", i)] = "v"
	}
	req := func(f func(r *apitype.StartServiceRequest)) apitype.StartServiceRequest {
		r := apitype.StartServiceRequest{Name: "x", Command: "sleep 60"}
		f(&r)
		return r
	}
	port := 8080
	tests := []struct {
		name  string
		req   apitype.StartServiceRequest
		field string
		msg   string
	}{
		{"command", req(func(r *apitype.StartServiceRequest) { r.Command = strings.Repeat("a", 100<<10) }),
			"command", "command is 102400 bytes long; the limit is 65536 bytes (64 KiB)"},
		{"cwd", req(func(r *apitype.StartServiceRequest) { r.Cwd = "/" + strings.Repeat("d", 5000) }),
			"cwd", "cwd is 5001 bytes long; the limit is 4096 bytes (4 KiB)"},
		{"env keys", req(func(r *apitype.StartServiceRequest) { r.Env = manyKeys }),
			"env", "env has 257 variables; the limit is 256"},
		{"env bytes", req(func(r *apitype.StartServiceRequest) { r.Env = map[string]string{"BIG": strings.Repeat("v", 130<<10)} }),
			"env", "env holds 133123 bytes of keys and values; the limit is 65536 bytes (64 KiB)"},
		{"stopTimeoutMs", req(func(r *apitype.StartServiceRequest) { r.StopTimeoutMs = intp(9223372036854) }),
			"stopTimeoutMs", "stopTimeoutMs must be from 0 to 300000 (5 minutes), got 9223372036854"},
		{"stopTimeoutMs max int", req(func(r *apitype.StartServiceRequest) { r.StopTimeoutMs = intp(1<<63 - 1) }),
			"stopTimeoutMs", "stopTimeoutMs must be from 0 to 300000 (5 minutes), got 9223372036854775807"},
		{"maxRestarts", req(func(r *apitype.StartServiceRequest) { r.MaxRestarts = intp(1 << 40) }),
			"maxRestarts", "maxRestarts must be from 0 to 1000, got 1099511627776"},
		{"readiness timeoutMs", req(func(r *apitype.StartServiceRequest) {
			r.Readiness = &apitype.Readiness{TCP: &port, TimeoutMs: 1<<63 - 1}
		}), "readiness.timeoutMs", "readiness.timeoutMs must be from 1 to 3600000 (1 hour), got 9223372036854775807"},
		{"readiness negative timeoutMs", req(func(r *apitype.StartServiceRequest) {
			r.Readiness = &apitype.Readiness{TCP: &port, TimeoutMs: -1}
		}), "readiness.timeoutMs", "readiness.timeoutMs must be from 1 to 3600000 (1 hour), got -1"},
		{"readiness http", req(func(r *apitype.StartServiceRequest) {
			r.Readiness = &apitype.Readiness{HTTP: "http://localhost/" + strings.Repeat("p", 5000)}
		}), "readiness.http", "readiness.http is 5017 bytes long; the limit is 4096 bytes (4 KiB)"},
		{"readiness log", req(func(r *apitype.StartServiceRequest) {
			r.Readiness = &apitype.Readiness{Log: strings.Repeat("a", 5000)}
		}), "readiness.log", "readiness.log is 5000 bytes long; the limit is 4096 bytes (4 KiB)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := m.Start(t.Context(), tt.req)
			var le *rules.LimitError
			if !errors.Is(err, ErrInvalid) || !errors.As(err, &le) {
				t.Fatalf("Start = %v, want ErrInvalid with a *rules.LimitError", err)
			}
			if le.Field != tt.field || err.Error() != tt.msg {
				t.Errorf("Start = {%q, %q}, want {%q, %q}", le.Field, err.Error(), tt.field, tt.msg)
			}
		})
	}
	if list := m.List(); len(list) != 0 {
		t.Errorf("List after refused starts = %+v, want empty", list)
	}
	// At the bounds, a start goes through.
	at := req(func(r *apitype.StartServiceRequest) {
		r.Command = "sleep 60 #" + strings.Repeat("c", rules.MaxCommandBytes-10)
		r.StopTimeoutMs = intp(rules.MaxStopTimeoutMs)
		r.MaxRestarts = intp(rules.MaxRestartsLimit)
		r.Env = map[string]string{"BIG": strings.Repeat("v", rules.MaxEnvBytes-3)}
	})
	start(t, m, at)
	if err := m.Stop(t.Context(), "x"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// writeStoppedServices records n stopped services named old-000… in a state dir.
func writeStoppedServices(t *testing.T, dir string, n int) {
	t.Helper()
	st := newState()
	for i := range n {
		name := fmt.Sprintf("old-%03d", i)
		stopped := int64(1000 + i)
		st.Services[name] = &record{Order: int64(i + 1), ServiceInfo: apitype.ServiceInfo{
			Name: name, Command: "true", Cwd: "/", Status: apitype.StatusStopped, StartedAt: int64(i), StoppedAt: &stopped,
		}}
	}
	b, err := encodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestServiceCap: with the cap nearly reached, concurrent starts of new
// names admit exactly what fits; the others are ErrConflict naming stopped
// services to reuse, and reusing one works.
func TestServiceCap(t *testing.T) {
	dir := t.TempDir()
	writeStoppedServices(t, dir, rules.MaxServices-2)
	const tries = 6
	names := []string{"old-000"}
	for i := range tries {
		names = append(names, fmt.Sprintf("new-%d", i))
	}
	m := managerStopping(t, Config{StateDir: dir}, names...)
	var wg sync.WaitGroup
	errs := make([]error, tries)
	for i := range tries {
		wg.Go(func() {
			_, errs[i] = m.Start(t.Context(), apitype.StartServiceRequest{Name: fmt.Sprintf("new-%d", i), Command: "sleep 60"})
		})
	}
	wg.Wait()
	ok := 0
	want := `cannot add another service: 256 are recorded and the limit is 256; start the new command under the name of a stopped service ("old-000", "old-001", "old-002") to replace it`
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrConflict) || !strings.HasSuffix(err.Error(), want):
			t.Errorf("Start(new-%d) = %v, want nil or ErrConflict ending %q", i, err, want)
		}
	}
	if ok != 2 {
		t.Errorf("%d of %d starts of new names succeeded, want 2", ok, tries)
	}
	if list := m.List(); len(list) != rules.MaxServices {
		t.Errorf("List has %d services, want %d", len(list), rules.MaxServices)
	}
	// Reusing a stopped name (and restarting a running one) is always allowed.
	start(t, m, apitype.StartServiceRequest{Name: "old-000", Command: "sleep 60"})
	if _, err := m.Restart(t.Context(), "old-000"); err != nil {
		t.Errorf("Restart(old-000) at the cap: %v", err)
	}
}

// TestTotalBudget: a start that would take the recorded services past
// rules.MaxTotalBytes is ErrConflict; a small service, a replacement that
// fits, and a restart of a service as recorded (even past the budget) are not.
func TestTotalBudget(t *testing.T) {
	st := newState()
	for i := range 40 {
		name := fmt.Sprintf("old-%03d", i)
		st.Services[name] = &record{Order: int64(i + 1), ServiceInfo: apitype.ServiceInfo{
			Name: name, Command: strings.Repeat("c", 60<<10), Cwd: "/w", Status: apitype.StatusStopped,
			StartedAt: int64(i), Env: map[string]string{"E": strings.Repeat("e", 40<<10-1)},
		}}
	}
	// 40 × 100 KiB recorded; the budget leaves 96 KiB.
	big := spec{apitype.StartServiceRequest{Name: "big", Command: strings.Repeat("c", rules.MaxCommandBytes), Cwd: "/w",
		Env: map[string]string{"E": strings.Repeat("e", rules.MaxEnvBytes-1)}}}
	err := admit(st, big)
	want := `cannot record this service: its command, cwd, env and probe (131074 bytes) and those of the services recorded would hold 4227154 bytes together; the limit is 4194304 bytes (4 MiB); shorten the command or env, or start it under the name of a stopped service ("old-000", "old-001", "old-002") to replace it`
	if !errors.Is(err, ErrConflict) || err.Error() != want {
		t.Errorf("admit(big) = %v, want ErrConflict %q", err, want)
	}
	if err := admit(st, spec{apitype.StartServiceRequest{Name: "small", Command: "sleep 60"}}); err != nil {
		t.Errorf("admit(small) = %v, want nil", err)
	}
	big.Name = "old-000" // replaces 100 KiB: fits
	if err := admit(st, big); err != nil {
		t.Errorf("admit(big as old-000) = %v, want nil", err)
	}
	// Past the budget (a state from before it), a restart as recorded is admitted.
	st.Services["huge"] = &record{ServiceInfo: apitype.ServiceInfo{Name: "huge", Command: strings.Repeat("c", 1<<20)}}
	if err := admit(st, st.Services["old-001"].spec()); err != nil {
		t.Errorf("admit(old-001 as recorded) past the budget = %v, want nil", err)
	}
}

// managerStopping is newTestManager for a state with many stopped services:
// the cleanup stops only the named ones (stopping each recorded service
// rewrites the whole state, which is slow under -race).
func managerStopping(t *testing.T, cfg Config, names ...string) *Manager {
	t.Helper()
	if cfg.WorkspaceDir == "" {
		cfg.WorkspaceDir = t.TempDir()
	}
	cfg.StopTimeout = 2 * time.Second
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range names {
			if err := m.Stop(context.Background(), n); err != nil && !errors.Is(err, ErrNotFound) {
				t.Errorf("cleanup: Stop(%q): %v", n, err)
			}
		}
		m.Close()
	})
	return m
}

// TestStopGraceOfRecordedTimeout: a recorded stopTimeoutMs out of bounds (a
// state from before them) is clamped, never an endless stop nor an overflow.
func TestStopGraceOfRecordedTimeout(t *testing.T) {
	for _, tt := range []struct {
		ms   int
		want time.Duration
	}{
		{0, 0}, {1500, 1500 * time.Millisecond}, {-7, 0},
		{9223372036854, 5 * time.Minute}, {1<<63 - 1, 5 * time.Minute},
	} {
		_, got := (&record{ServiceInfo: apitype.ServiceInfo{StopTimeoutMs: &tt.ms}}).spec().stopSettings(5 * time.Second)
		if got != tt.want {
			t.Errorf("stop grace of stopTimeoutMs %d = %v, want %v", tt.ms, got, tt.want)
		}
	}
}

// The stop signals the manager maps are exactly the ones requests may name.
func TestStopSignalsMatchTheRequestRule(t *testing.T) {
	got := slices.Sorted(maps.Keys(stopSignals))
	want := slices.Sorted(slices.Values(apitype.StopSignals))
	if !slices.Equal(got, want) {
		t.Errorf("stop signals mapped %v, allowed by apitype %v", got, want)
	}
}
