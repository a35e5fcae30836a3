package coderun

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// gatedEngine is the real engine whose Terminate waits, once armed, until the test
// opens the gate: a reap can be held in the middle of its terminates.
type gatedEngine struct {
	*local.Engine
	mu      sync.Mutex
	armed   bool
	entered chan string
	gate    chan struct{}
}

func (e *gatedEngine) Terminate(ctx context.Context, id string) error {
	e.mu.Lock()
	armed := e.armed
	e.mu.Unlock()
	if armed {
		e.entered <- id
		<-e.gate
	}
	return e.Engine.Terminate(ctx, id)
}

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// While the reaper terminates an idle session's sandbox, another session runs code:
// no lock is held across the terminate. The idle session's next call boots a new
// sandbox once the old one is gone.
func TestReapDoesNotBlockRuns(t *testing.T) {
	eng := &gatedEngine{Engine: needRuntime(t), entered: make(chan string, 1), gate: make(chan struct{})}
	clock := &testClock{now: time.Now()}
	r, _ := newRunner(t, testConfig(t, ""), Options{Engine: eng, Now: clock.Now, ReapEvery: -1})
	idle, busy := session(t, r, "reap-idle"), session(t, r, "reap-busy")
	if res := run(t, idle, "globalThis.x = 1"); !res.Success {
		t.Fatal(res)
	}
	old, _ := idle.Sandbox(t.Context())
	now := clock.Add(10 * time.Minute)
	if res := run(t, busy, "1"); !res.Success {
		t.Fatal(res)
	}
	eng.mu.Lock()
	eng.armed = true
	eng.mu.Unlock()
	type reapResult struct {
		ids []string
		err error
	}
	reaped := make(chan reapResult, 1)
	go func() {
		ids, err := r.ReapIdle(context.Background(), now)
		reaped <- reapResult{ids, err}
	}()
	select {
	case id := <-eng.entered:
		if id != old {
			t.Errorf("the reaper terminates %s, want the idle session's %s", id, old)
		}
	case <-time.After(time.Minute):
		t.Fatal("the reaper never terminated the idle sandbox")
	}
	// The terminate is held: the other session runs, and the state is free.
	ran := make(chan RunResult, 1)
	go func() {
		res, err := busy.RunCode(context.Background(), "2 + 2", "")
		if err != nil {
			res.Error = err.Error()
		}
		ran <- res
	}()
	select {
	case res := <-ran:
		if !res.Success || string(res.Result) != "4" {
			t.Errorf("run_code during the reap = %+v", res)
		}
	case <-time.After(time.Minute):
		t.Error("run_code of another session waited for the reaper's terminate")
	}
	if st, err := idle.state(); err != nil || st.Sandbox != "" {
		t.Errorf("the idle session's state during its terminate = %+v, %v; want no sandbox", st, err)
	}
	eng.mu.Lock()
	eng.armed = false
	eng.mu.Unlock()
	close(eng.gate)
	got := <-reaped
	if got.err != nil || !slices.Equal(got.ids, []string{"reap-idle"}) {
		t.Errorf("ReapIdle = %q, %v; want [reap-idle]", got.ids, got.err)
	}
	if info, err := eng.Get(t.Context(), old); err == nil && info.State == engine.StateRunning {
		t.Errorf("the idle sandbox %s still runs", old)
	}
	res := run(t, idle, "typeof x")
	if !res.Success || string(res.Result) != `"undefined"` {
		t.Errorf("the reaped session's next call = %+v, want a fresh REPL", res)
	}
	if now, _ := idle.Sandbox(t.Context()); now == "" || now == old {
		t.Errorf("sandbox after the reap = %q (old %s), want a new one", now, old)
	}
}

// Cleanup's report lists are never null, and a ttl of 0 deletes every volume no
// sandbox mounts, while ConfigTTL keeps those within volume_ttl_minutes.
func TestCleanupTTLZero(t *testing.T) {
	r, _ := newRunner(t, testConfig(t, ""), Options{ReapEvery: -1})
	ctx := t.Context()
	s := session(t, r, "ttl-zero")
	if res := run(t, s, "1"); !res.Success {
		t.Fatal(res)
	}
	vol := s.Volume()
	rep, err := r.Cleanup(ctx, time.Now(), ConfigTTL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	if string(b) != `{"sandboxes":[],"volumes":[]}` {
		t.Errorf("Cleanup with nothing to do = %s, want empty lists", b)
	}
	// A live sandbox keeps its volume even at ttl 0.
	if rep, err = r.Cleanup(ctx, time.Now(), 0); err != nil || slices.Contains(rep.Volumes, vol) {
		t.Errorf("Cleanup(ttl 0) with the sandbox up = %+v, %v; want %s kept", rep, err, vol)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if rep, err = r.Cleanup(ctx, time.Now(), ConfigTTL); err != nil || slices.Contains(rep.Volumes, vol) {
		t.Errorf("Cleanup(ConfigTTL) just after use = %+v, %v; want %s kept", rep, err, vol)
	}
	if rep, err = r.Cleanup(ctx, time.Now(), 0); err != nil || !slices.Equal(rep.Volumes, []string{vol}) {
		t.Errorf("Cleanup(ttl 0) = %+v, %v; want [%s] deleted", rep, err, vol)
	}
}

// A runner's unclaimed spares end with it, and an MCP connection's sessions (its own
// and the named ones it used) end with the connection.
func TestExitEndsSandboxes(t *testing.T) {
	eng := needRuntime(t)
	// newRunner's runner sweeps the volumes at the end; r is the one that exits.
	sweeper, _ := newRunner(t, testConfig(t, ""), Options{ReapEvery: -1})
	o := sweeper.o
	o.ReapEvery, o.Spares = -1, 1
	r, err := New(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.FillSpares(t.Context()); err != nil {
		t.Fatal(err)
	}
	cs, end := connect(t, r)
	named := fmt.Sprintf("named-%d", time.Now().UnixNano())
	for _, args := range []map[string]any{{"code": "1"}, {"code": "2", "session": named}} {
		if out := callText(t, cs, "run_code", args); !strings.Contains(out, `"success":true`) {
			t.Fatalf("run_code %v = %s", args, out)
		}
	}
	end()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	list, err := eng.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list {
		l := i.Labels["coderun-session"]
		if i.State == engine.StateRunning && (strings.HasPrefix(l, "mcp-") || l == named || isSpare(l)) {
			t.Errorf("sandbox %s of %q runs after the connection and the runner ended", i.ID, l)
		}
	}
}

// TestLockSession: a session held by a call (waiting lock) is busy to the try-lock of
// the reaper and Cleanup, in this process too; another session is not; released, the
// try takes it, and a waiting call gets it once the try lets go.
func TestLockSession(t *testing.T) {
	r := &Runner{o: Options{DataDir: t.TempDir()}}
	unlock, err := r.lockSession("busy", true)
	if err != nil || unlock == nil {
		t.Fatalf("lockSession(wait) = %v, want the lock", err)
	}
	if u, err := r.lockSession("busy", false); err != nil || u != nil {
		t.Errorf("try of a held session = %v, %v, want busy (nil, nil)", u != nil, err)
	}
	u, err := r.lockSession("other", false)
	if err != nil || u == nil {
		t.Fatalf("try of another session = %v, want the lock", err)
	}
	u()
	unlock()
	u, err = r.lockSession("busy", false)
	if err != nil || u == nil {
		t.Fatalf("try of a released session = %v, want the lock", err)
	}
	if again, err := r.lockSession("busy", false); err != nil || again != nil {
		t.Errorf("second try of a session the first try holds = %v, %v, want busy", again != nil, err)
	}
	got := make(chan func(), 1)
	go func() {
		w, _ := r.lockSession("busy", true)
		got <- w
	}()
	u()
	w := <-got
	if w == nil {
		t.Fatal("the waiting call did not get the lock")
	}
	w()
}
