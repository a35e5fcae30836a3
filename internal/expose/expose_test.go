package expose

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// memoryStore keeps the exposed port in memory.
type memoryStore struct {
	mu   sync.Mutex
	port *int
}

func (s *memoryStore) ExposedPort() *int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

func (s *memoryStore) SetExposedPort(port int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.port = &port
	return nil
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

func newExposer(t *testing.T, store Store) *Exposer {
	t.Helper()
	dir := t.TempDir()
	e, err := New(t.Context(), Options{
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
	store := &memoryStore{}
	store.SetExposedPort(a)
	e := newExposer(t, store)
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
	store := &memoryStore{}
	e := newExposer(t, store)
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
		if p := store.ExposedPort(); p == nil || *p != tc.port {
			t.Errorf("after SetExposedPort(%d), store = %v", tc.port, p)
		}
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
	memoryStore
}

func (s *jitterStore) SetExposedPort(port int) error {
	time.Sleep(time.Duration(port%7) * time.Millisecond)
	return s.memoryStore.SetExposedPort(port)
}

// TestConcurrentExposeKeepsProxyAndStateTogether: after concurrent exposes,
// the preview proxy goes where the recorded port (what GET /api/services and
// the next start say) points.
func TestConcurrentExposeKeepsProxyAndStateTogether(t *testing.T) {
	store := &jitterStore{}
	e := newExposer(t, store)
	for round := range 20 {
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() { _ = e.SetExposedPort(20000 + round*10 + i) })
		}
		wg.Wait()
		got, _ := e.proxy.Upstream(t.Context())
		if rec := store.ExposedPort(); rec == nil || *rec != got {
			t.Fatalf("round %d: preview proxy goes to %d, recorded port is %v", round, got, rec)
		}
	}
}
