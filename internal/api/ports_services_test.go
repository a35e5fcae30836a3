package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
)

// TestPortsAttributesRealService starts a listener through the real service
// manager and checks /api/ports names it, then forgets it after the stop.
func TestPortsAttributesRealService(t *testing.T) {
	m, err := services.New(services.Config{StateDir: t.TempDir(), WorkspaceDir: t.TempDir(), StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	exp := &recordingExposer{}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Services: m, Ports: newScanner(t, -1), Expose: exp})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); ts.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	// A grandchild of bash (not exec'd), so attribution cannot rely on the service pid alone.
	cmd := fmt.Sprintf("python3 -m http.server %d --bind 127.0.0.1; echo done", port)
	info, err := m.Start(context.Background(), apitype.StartServiceRequest{Name: "web", Command: cmd})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background(), "web") })
	if err := exp.SetExposedPort(port); err != nil {
		t.Fatal(err)
	}

	var got apitype.Port
	deadline := time.Now().Add(20 * time.Second)
	for {
		if p, ok := findPort(listPorts(t, ts.URL), port); ok {
			got = p
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port %d of service web not listed within 20 s", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got.Service != "web" {
		t.Errorf("port %d service = %q, want web", port, got.Service)
	}
	if got.PID == 0 || got.PID == info.PID {
		t.Errorf("port %d pid = %d, want the python grandchild's pid (bash is %d)", port, got.PID, info.PID)
	}
	if !got.Exposed {
		t.Errorf("port %d exposed = false, want true", port)
	}

	if err := m.Stop(context.Background(), "web"); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if p, ok := findPort(listPorts(t, ts.URL), port); ok {
		t.Errorf("after stop, port %d still listed: %+v", port, p)
	}
}
