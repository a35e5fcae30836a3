package services

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// writeStateAtBounds records rules.MaxServices stopped services, each with
// 256 env keys and the other fields at their bounds, scaled by frac (1: every
// field at its bound), and returns the size of state.json. svc-000 runs in
// cwd, so it can be restarted.
func writeStateAtBounds(tb testing.TB, dir, cwd string, frac float64) int64 {
	tb.Helper()
	scale := func(n int) int { return int(float64(n) * frac) }
	st := newState()
	env := map[string]string{}
	for i := range rules.MaxEnvKeys {
		env[fmt.Sprintf("VAR_%03d", i)] = strings.Repeat("v", scale(rules.MaxEnvBytes/rules.MaxEnvKeys)-7)
	}
	stopTimeout, maxRestarts := rules.MaxStopTimeoutMs, rules.MaxRestartsLimit
	for i := range rules.MaxServices {
		name := fmt.Sprintf("svc-%03d", i)
		dir := "/" + strings.Repeat("d", scale(rules.MaxCwdBytes)-1)
		if i == 0 {
			dir = cwd
		}
		st.Services[name] = &record{Order: int64(i + 1), ServiceInfo: apitype.ServiceInfo{
			Name: name, Command: "sleep 60 #" + strings.Repeat("c", scale(rules.MaxCommandBytes)-10), Cwd: dir,
			Status: apitype.StatusStopped, StartedAt: time.Now().UnixMilli(), LogFile: "/dev/null",
			Restart: apitype.RestartOnFailure, MaxRestarts: &maxRestarts, StopTimeoutMs: &stopTimeout, Env: env,
			Readiness: &apitype.Readiness{Log: strings.Repeat("l", scale(rules.MaxProbeBytes)), TimeoutMs: rules.MaxReadyTimeoutMs},
		}}
	}
	b, err := encodeState(st)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return int64(len(b))
}

// BenchmarkStateAtBounds measures a state of 256 services: its size, loading
// it, a list (and its JSON), and a restart (which rewrites the state file).
// "budget" fills rules.MaxTotalBytes, the most a sidecar now records;
// "fields" has every field of every service at its bound, which only a
// state written before the budget can hold. Run with -benchtime=3x.
func BenchmarkStateAtBounds(b *testing.B) {
	perService := rules.MaxCommandBytes + rules.MaxEnvBytes + rules.MaxCwdBytes + rules.MaxProbeBytes
	b.Run("budget", func(b *testing.B) { benchState(b, float64(rules.MaxTotalBytes)/float64(rules.MaxServices*perService)) })
	b.Run("fields", func(b *testing.B) { benchState(b, 1) })
}

func benchState(b *testing.B, frac float64) {
	dir, cwd := b.TempDir(), b.TempDir()
	size := writeStateAtBounds(b, dir, cwd, frac)
	b.Logf("state.json with %d services: %.1f MB", rules.MaxServices, float64(size)/1e6)
	b.Run("New", func(b *testing.B) {
		for b.Loop() {
			m, err := New(Config{StateDir: dir, WorkspaceDir: cwd})
			if err != nil {
				b.Fatal(err)
			}
			m.Close()
		}
		b.ReportMetric(float64(size), "state-bytes")
	})
	m, err := New(Config{StateDir: dir, WorkspaceDir: cwd, StopTimeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = m.Stop(context.Background(), "svc-000")
		m.Close()
	}()
	b.Run("List", func(b *testing.B) {
		for b.Loop() {
			if l := m.List(); len(l) != rules.MaxServices {
				b.Fatalf("List has %d services", len(l))
			}
		}
	})
	b.Run("ListJSON", func(b *testing.B) {
		var n int
		for b.Loop() {
			body, err := json.Marshal(apitype.ServicesResponse{Services: m.List()})
			if err != nil {
				b.Fatal(err)
			}
			n = len(body)
		}
		b.ReportMetric(float64(n), "body-bytes")
	})
	b.Run("Restart", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Restart(b.Context(), "svc-000"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("StartRefused", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.Start(b.Context(), apitype.StartServiceRequest{Name: "one-too-many", Command: "true"}); err == nil {
				b.Fatal("a 257th service was admitted")
			}
		}
	})
}
