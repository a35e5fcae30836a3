package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/ports"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// fakeServices is a service list for annotating ports; the service manager
// itself is not under test here.
type fakeServices struct {
	list []apitype.ServiceInfo
}

func (f *fakeServices) List() []apitype.ServiceInfo { return f.list }
func (f *fakeServices) Get(string) (apitype.ServiceInfo, error) {
	return apitype.ServiceInfo{}, errors.New("not implemented")
}
func (f *fakeServices) Start(context.Context, apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	return apitype.ServiceInfo{}, errors.New("not implemented")
}
func (f *fakeServices) Stop(context.Context, string) error { return errors.New("not implemented") }
func (f *fakeServices) Restart(context.Context, string) (apitype.ServiceInfo, error) {
	return apitype.ServiceInfo{}, errors.New("not implemented")
}

func newScanner(t testing.TB, maxAge time.Duration) *ports.Scanner {
	t.Helper()
	s, err := ports.New(ports.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxAge: maxAge})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func listPorts(t *testing.T, u string) []apitype.Port {
	t.Helper()
	code, body := get(t, u+"/api/ports")
	if code != 200 {
		t.Fatalf("GET /api/ports = %d %s, want 200", code, body)
	}
	var r apitype.PortsResponse
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("GET /api/ports body %s: %v", body, err)
	}
	return r.Ports
}

func findPort(ps []apitype.Port, port int) (apitype.Port, bool) {
	i := slices.IndexFunc(ps, func(p apitype.Port) bool { return p.Port == port })
	if i < 0 {
		return apitype.Port{}, false
	}
	return ps[i], true
}

func TestPorts(t *testing.T) {
	marked, markedPort := testutil.HTTPServer(t, "SANDBOX_MCP_SERVICE=web")
	grouped, groupedPort := testutil.HTTPServer(t)
	svcs := &fakeServices{
		list: []apitype.ServiceInfo{
			{Name: "api", PID: grouped.Process.Pid, Status: apitype.StatusRunning},
			{Name: "old", PID: marked.Process.Pid, Status: apitype.StatusStopped},
		},
	}
	ts := newTestServer(t, Options{Token: testToken, Ports: newScanner(t, -1), Services: svcs, Expose: &recordingExposer{port: &groupedPort}})
	own, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ownPort := own.Addr().(*net.TCPAddr).Port

	deadline := time.Now().Add(10 * time.Second)
	var ps []apitype.Port
	for {
		ps = listPorts(t, ts.URL)
		_, ok1 := findPort(ps, markedPort)
		_, ok2 := findPort(ps, groupedPort)
		if ok1 && ok2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ports %d and %d not listed within 10s: %+v", markedPort, groupedPort, ps)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tests := []struct {
		port int
		want apitype.Port
	}{
		{markedPort, apitype.Port{Port: markedPort, Address: "127.0.0.1", Family: "ipv4", PID: marked.Process.Pid, Service: "web"}},
		{groupedPort, apitype.Port{Port: groupedPort, Address: "127.0.0.1", Family: "ipv4", PID: grouped.Process.Pid, Service: "api", Exposed: true}},
		{ownPort, apitype.Port{Port: ownPort, Address: "127.0.0.1", Family: "ipv4", PID: os.Getpid(), Kind: "sidecar"}},
	}
	for _, tt := range tests {
		got, ok := findPort(ps, tt.port)
		got.Command = "" // checked below
		if !ok || got != tt.want {
			t.Errorf("port %d = %+v (found %v), want %+v", tt.port, got, ok, tt.want)
		}
	}
	if p, _ := findPort(ps, markedPort); !strings.Contains(p.Command, "python3") || !strings.HasSuffix(p.Command, " -u -m http.server 0 --bind 127.0.0.1") {
		t.Errorf("port %d command = %q, want python's command line", markedPort, p.Command)
	}

	// Stopped: gone from the list.
	testutil.KillGroup(marked)
	for {
		if _, ok := findPort(listPorts(t, ts.URL), markedPort); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d still listed 10s after its process was killed", markedPort)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPortsWithoutServices(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken, Ports: newScanner(t, -1)})
	cmd, port := testutil.HTTPServer(t, "SANDBOX_MCP_SERVICE=web")
	p, ok := findPort(listPorts(t, ts.URL), port)
	if !ok || p.PID != cmd.Process.Pid || p.Service != "web" || p.Exposed {
		t.Errorf("port %d without a service manager = %+v (found %v), want pid %d service web not exposed", port, p, ok, cmd.Process.Pid)
	}
	if code, body := get(t, newTestServer(t, Options{Token: testToken}).URL+"/api/ports"); code != 501 {
		t.Errorf("GET /api/ports without Ports = %d %s, want 501", code, body)
	}
}

func benchmarkPorts(b *testing.B, maxAge time.Duration) {
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ports: newScanner(b, maxAge), Services: &fakeServices{}})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	req := httptest.NewRequest("GET", "/api/ports", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	for b.Loop() {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("GET /api/ports = %d %s", w.Code, w.Body)
		}
	}
}

// BenchmarkPortsUncached measures GET /api/ports scanning /proc every time.
func BenchmarkPortsUncached(b *testing.B) { benchmarkPorts(b, -1) }

// BenchmarkPortsCached measures GET /api/ports answered from the 1 s cache.
func BenchmarkPortsCached(b *testing.B) { benchmarkPorts(b, time.Second) }
