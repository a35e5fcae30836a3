package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
)

func init() {
	// The service manager re-executes this test binary as its monitor.
	services.RunMonitorIfRequested()
	// Race-enabled monitors would otherwise linger a second at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
}

// newServicesServer serves a real manager over loopback.
func newServicesServer(t testing.TB) (string, *services.Manager) {
	t.Helper()
	m, err := services.New(services.Config{StateDir: t.TempDir(), WorkspaceDir: t.TempDir(), StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("services.New: %v", err)
	}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: m, Events: m})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() {
		s.Close()
		ts.Close()
		list := m.List()
		for _, svc := range list {
			_ = m.Stop(context.Background(), svc.Name)
		}
		m.Close()
	})
	return ts.URL, m
}

func authed(t testing.TB, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestServicesAPI(t *testing.T) {
	url, _ := newServicesServer(t)
	code, body := authed(t, "GET", url+"/api/services", "")
	if code != 200 || body != `{"services":[],"exposedPort":null}` {
		t.Fatalf("GET /api/services = %d %s, want 200 with no services", code, body)
	}
	code, body = authed(t, "POST", url+"/api/services", `{"name":"web","command":"echo up; sleep 300"}`)
	var started apitype.ServiceResponse
	if code != 200 || json.Unmarshal([]byte(body), &started) != nil || started.Service.Status != "running" || started.Service.PID == 0 {
		t.Fatalf("POST /api/services = %d %s, want 200 with a running service", code, body)
	}
	code, body = authed(t, "GET", url+"/api/services/web", "")
	if code != 200 || !strings.Contains(body, `"status":"running"`) {
		t.Errorf("GET /api/services/web = %d %s, want 200 running", code, body)
	}
	code, body = authed(t, "POST", url+"/api/services/web/restart", "")
	var restarted apitype.ServiceResponse
	if code != 200 || json.Unmarshal([]byte(body), &restarted) != nil || restarted.Service.PID == started.Service.PID {
		t.Errorf("POST /api/services/web/restart = %d %s, want 200 with a new pid", code, body)
	}
	code, body = authed(t, "GET", url+"/api/services", "")
	var list apitype.ServicesResponse
	if code != 200 || json.Unmarshal([]byte(body), &list) != nil || len(list.Services) != 1 || list.Services[0].Name != "web" {
		t.Errorf("GET /api/services = %d %s, want web", code, body)
	}
	code, body = authed(t, "DELETE", url+"/api/services/web", "")
	if code != 200 || body != `{"success":true}` {
		t.Errorf("DELETE /api/services/web = %d %s, want 200 success", code, body)
	}
	code, body = authed(t, "GET", url+"/api/services/web", "")
	if code != 200 || !strings.Contains(body, `"status":"stopped"`) {
		t.Errorf("GET /api/services/web after stop = %d %s, want stopped", code, body)
	}
	for _, tt := range []struct{ method, path string }{
		{"DELETE", "/api/services/nope"},
		{"GET", "/api/services/nope"},
		{"POST", "/api/services/nope/restart"},
	} {
		code, body := authed(t, tt.method, url+tt.path, "")
		if code != 404 || body != `{"error":"Service \"nope\" not found"}` {
			t.Errorf("%s %s = %d %s, want 404 Service \"nope\" not found", tt.method, tt.path, code, body)
		}
	}
}

func TestStartServiceBadInput(t *testing.T) {
	url, _ := newServicesServer(t)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		body, want string
	}{
		{`{"command":"true"}`, "name and command are required"},
		{`{"name":"","command":"true"}`, "name and command are required"},
		{`{"name":"x"}`, "name and command are required"},
		{`{"name":"../x","command":"true"}`, `service name \"../x\" may contain only letters, digits, '.', '_' and '-'`},
		{`{"name":"a/b","command":"true"}`, `service name \"a/b\" may contain only letters, digits, '.', '_' and '-'`},
		{fmt.Sprintf(`{"name":%q,"command":"true"}`, strings.Repeat("a", 65)), "service name is 65 characters long; the limit is 64"},
		{`{"name":"x","command":"true","cwd":"/no/such/dir"}`, `cwd \"/no/such/dir\" does not exist`},
		{fmt.Sprintf(`{"name":"x","command":"true","cwd":%q}`, file), fmt.Sprintf(`cwd \"%s\" is not a directory`, file)},
		{`{"name":"x","command":"true","restart":"maybe"}`, `restart must be \"no\", \"on-failure\" or \"always\"`},
		{`{"name":5,"command":"true"}`, `invalid JSON: field \"name\" must be string`},
		{`{"name":"x",`, "invalid JSON: unexpected EOF"},
	}
	for _, tt := range tests {
		code, body := authed(t, "POST", url+"/api/services", tt.body)
		if want := `{"error":"` + tt.want + `"}`; code != 400 || body != want {
			t.Errorf("POST /api/services %s = %d %s, want 400 %s", tt.body, code, body, want)
		}
	}
	if code, body := authed(t, "GET", url+"/api/services", ""); code != 200 || body != `{"services":[],"exposedPort":null}` {
		t.Errorf("GET /api/services after bad input = %d %s, want 200 and nothing started", code, body)
	}
	if code, _ := authed(t, "GET", url+"/api/health", ""); code != 200 {
		t.Errorf("GET /api/health after bad input = %d, want 200", code)
	}
}

// sseFrames reads `data:` payloads and comment lines from an SSE body.
func sseFrames(t *testing.T, body io.Reader) <-chan string {
	out := make(chan string, 100)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			if line := sc.Text(); line != "" {
				out <- line
			}
		}
	}()
	return out
}

func nextFrame(t *testing.T, frames <-chan string) string {
	t.Helper()
	select {
	case f, ok := <-frames:
		if !ok {
			t.Fatal("event stream ended")
		}
		return f
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for an event")
	}
	return ""
}

func TestEventsStream(t *testing.T) {
	old := eventsKeepAlive
	eventsKeepAlive = 100 * time.Millisecond
	t.Cleanup(func() { eventsKeepAlive = old })
	url, m := newServicesServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
		t.Fatalf("GET /api/events = %d %s, want 200 text/event-stream", resp.StatusCode, ct)
	}
	frames := sseFrames(t, resp.Body)
	if f := nextFrame(t, frames); f != ": keep-alive" {
		t.Errorf("first frame of an idle stream = %q, want a keep-alive comment", f)
	}
	port := 3000
	m.Publish(apitype.Event{Type: apitype.EventExposed, Port: &port})
	if _, err := m.Start(t.Context(), apitype.StartServiceRequest{Name: "ev", Command: "sleep 300"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(t.Context(), "ev"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 4 {
		f := nextFrame(t, frames)
		if !strings.HasPrefix(f, "data: ") {
			continue
		}
		var ev apitype.Event
		if err := json.Unmarshal([]byte(strings.TrimPrefix(f, "data: ")), &ev); err != nil || ev.Time == 0 {
			t.Fatalf("frame %q: %v, want an event with a time", f, err)
		}
		s := ev.Type + ":" + ev.Service
		if ev.Port != nil {
			s += fmt.Sprint(":", *ev.Port)
		}
		got = append(got, s)
	}
	want := "exposed::3000 started:ev ready:ev stopped:ev"
	if strings.Join(got, " ") != want {
		t.Errorf("events = %v, want %s", got, want)
	}
}

// fakeEvents counts subscriptions, to check the stream releases them.
type fakeEvents struct {
	mu     sync.Mutex
	active int
	ch     chan apitype.Event
}

func (f *fakeEvents) Subscribe() (<-chan apitype.Event, func()) {
	f.mu.Lock()
	f.active++
	f.mu.Unlock()
	return f.ch, func() { f.mu.Lock(); f.active--; f.mu.Unlock() }
}

func (f *fakeEvents) count() int { f.mu.Lock(); defer f.mu.Unlock(); return f.active }

func TestEventsStreamReleasesSubscription(t *testing.T) {
	ev := &fakeEvents{ch: make(chan apitype.Event)}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Events: ev})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	open := func() (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/events", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, cancel
	}
	waitCount := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for ev.count() != want {
			if time.Now().After(deadline) {
				t.Fatalf("active subscriptions = %d, want %d", ev.count(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The client goes away.
	resp, cancel := open()
	waitCount(1)
	cancel()
	resp.Body.Close()
	waitCount(0)
	// The server shuts down: the stream ends.
	resp, cancel = open()
	defer cancel()
	waitCount(1)
	s.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Errorf("reading the stream after server Close: %v", err)
	}
	resp.Body.Close()
	waitCount(0)
}
