package expose

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// newStore is the state file of a fresh state dir, as the sidecar uses it.
func newStore(t *testing.T) statefile.ExposedPort { return statefile.ExposedPort{Dir: t.TempDir()} }

// recorded is the port the store holds.
func recorded(t *testing.T, s Store) *int {
	t.Helper()
	p, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func get(t *testing.T, url string) (string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.Header
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newExposer(t *testing.T, store Store, onExposed ...func(int)) *Exposer {
	t.Helper()
	dir := t.TempDir()
	var on func(int)
	if len(onExposed) > 0 {
		on = onExposed[0]
	}
	e, err := New(t.Context(), Options{
		OnExposed:    on,
		PreviewAddr:  "127.0.0.1:0",
		CaddySnippet: filepath.Join(dir, "user.caddy"),
		Caddyfile:    filepath.Join(dir, "Caddyfile"),
		CaddyAdmin:   "unix/" + filepath.Join(dir, "none.sock"),
		Store:        store,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func TestExposedPortRestoredAtStart(t *testing.T) {
	a := testutil.EchoApp(t, "a")
	store := newStore(t)
	if err := store.Save(a); err != nil {
		t.Fatal(err)
	}
	e := newExposer(t, store)
	if p := e.ExposedPort(); p == nil || *p != a {
		t.Errorf("ExposedPort() after restart = %v, want %d", p, a)
	}
	if body, h := get(t, "http://"+e.PreviewAddr()+"/"); body != "a" || h.Get("X-Frame-Options") != "" {
		t.Errorf("GET preview proxy after restart = %q (X-Frame-Options %q), want %q without the header", body, h.Get("X-Frame-Options"), "a")
	}
	st := e.ExposeStatus(t.Context())
	if st.UpstreamPort == nil || *st.UpstreamPort != a || st.Upstream != "exposed" || st.CaddyRouted || st.CaddyError == "" {
		t.Errorf("ExposeStatus() = %+v, want upstream %d exposed, not routed, with a Caddy error", st, a)
	}
}

func TestSetExposedPortSwitchesUpstreamAndRecords(t *testing.T) {
	a, b := testutil.EchoApp(t, "a"), testutil.EchoApp(t, "b")
	store := newStore(t)
	var events []int
	e := newExposer(t, store, func(p int) { events = append(events, p) })
	for _, tc := range []struct {
		port int
		want string
	}{{a, "a"}, {b, "b"}, {a, "a"}} {
		if err := e.SetExposedPort(tc.port); err != nil {
			t.Fatal(err)
		}
		if body, _ := get(t, "http://"+e.PreviewAddr()+"/"); body != tc.want {
			t.Errorf("after SetExposedPort(%d), preview = %q, want %q", tc.port, body, tc.want)
		}
		if p := recorded(t, store); p == nil || *p != tc.port {
			t.Errorf("after SetExposedPort(%d), store = %v", tc.port, p)
		}
		if p := e.ExposedPort(); p == nil || *p != tc.port {
			t.Errorf("after SetExposedPort(%d), ExposedPort() = %v", tc.port, p)
		}
	}
	if fmt.Sprint(events) != fmt.Sprint([]int{a, b, a}) {
		t.Errorf("OnExposed got %v, want %v", events, []int{a, b, a})
	}
	if err := e.SetExposedPort(70000); err == nil {
		t.Error("SetExposedPort(70000) succeeded")
	}
}

// A port that cannot be recorded (the state dir is gone, the disk full) is
// exposed all the same: the answer follows what happened.
func TestSetExposedPortUnrecorded(t *testing.T) {
	a := testutil.EchoApp(t, "a")
	store := statefile.ExposedPort{Dir: filepath.Join(t.TempDir(), "missing")}
	e := newExposer(t, store)
	if err := e.SetExposedPort(a); err != nil {
		t.Fatalf("SetExposedPort with an unwritable store = %v, want success", err)
	}
	if p := e.ExposedPort(); p == nil || *p != a {
		t.Errorf("ExposedPort() = %v, want %d", p, a)
	}
	if body, _ := get(t, "http://"+e.PreviewAddr()+"/"); body != "a" {
		t.Errorf("preview = %q, want %q", body, "a")
	}
}

func TestNewRequiresStoreAndLogger(t *testing.T) {
	if _, err := New(t.Context(), Options{PreviewAddr: "127.0.0.1:0"}); err == nil {
		t.Error("New without Store and Logger succeeded, want an error")
	}
}

// jitterStore delays every write by a varying time, to let concurrent writes
// overtake each other.
type jitterStore struct {
	statefile.ExposedPort
}

func (s jitterStore) Save(port int) error {
	time.Sleep(time.Duration(port%7) * time.Millisecond)
	return s.ExposedPort.Save(port)
}

// TestConcurrentExposeKeepsProxyAndStateTogether: after concurrent exposes,
// the preview proxy goes where the recorded port (what GET /api/services and
// the next start say) points.
func TestConcurrentExposeKeepsProxyAndStateTogether(t *testing.T) {
	store := jitterStore{newStore(t)}
	e := newExposer(t, store)
	for round := range 20 {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() { _ = e.SetExposedPort(20000 + round*10 + i) })
		}
		wg.Wait()
		got, _ := e.proxy.Upstream(t.Context())
		if rec := recorded(t, store); rec == nil || *rec != got {
			t.Fatalf("round %d: preview proxy goes to %d, recorded port is %v", round, got, rec)
		}
	}
}
