package api

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/terminal"
)

// Issue 28: a stream route takes GET without a body only. HEAD wrote nothing,
// so a client that left was never noticed, and an unread body stopped the
// server's background read: either kept a stream open forever.
func TestStreamRoutesRefuseHeadAndBodies(t *testing.T) {
	ev := &fakeEvents{ch: make(chan apitype.Event)}
	term, err := terminal.New(terminal.Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = term.Close() })
	_, addr := serveHardened(t, Options{Token: testToken, Events: ev, Logs: &floodLogs{}, Terminal: term})
	auth := "Authorization: Bearer " + testToken + "\r\n"
	tests := []struct {
		name, req string
		status    int
		allow     string
		closed    bool // the server closes the connection after the answer
	}{
		{"HEAD events", "HEAD /api/events HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 405, "GET", false},
		{"HEAD events with a body", "HEAD /api/events HTTP/1.1\r\nHost: x\r\n" + auth + "Connection: close\r\nContent-Length: 5\r\n\r\nhello", 405, "GET", true},
		{"HEAD events announcing an unsent body", "HEAD /api/events HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 100000\r\n\r\n", 405, "GET", true},
		{"GET events with a body", "GET /api/events HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 5\r\n\r\nhello", 400, "", true},
		{"GET events with a chunked body", "GET /api/events HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 400, "", true},
		{"HEAD log stream", "HEAD /api/logs/web HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 405, "GET", false},
		{"GET log stream with a body", "GET /api/logs/web HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 2\r\n\r\n{}", 400, "", true},
		{"HEAD terminal", "HEAD /api/terminal HTTP/1.1\r\nHost: x\r\n" + auth + "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 405, "GET", false},
		{"GET terminal with a body", "GET /api/terminal HTTP/1.1\r\nHost: x\r\n" + auth + "Upgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 3\r\n\r\nabc", 400, "", true},
		// The log tail is no stream: HEAD stays accepted, as on every other route.
		{"HEAD log tail", "HEAD /api/logs/web?tail=5 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", 200, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawRequest(t, addr, tc.req)
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			method, _, _ := strings.Cut(tc.req, " ")
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil {
				t.Fatalf("read answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d", resp.StatusCode, tc.status)
			}
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow = %q, want %q", got, tc.allow)
			}
			if ct := resp.Header.Get("Content-Type"); tc.status != 200 && ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if tc.closed {
				expectClosed(t, c, br)
			}
		})
	}
	waitFor(t, func() bool { return ev.count() == 0 && len(term.Sessions()) == 0 }, "no event subscription and no terminal")
}

// Streams hold at most their share of the connection cap, so health checks
// and short requests still get a connection when every client streams.
func TestStreamsLeaveRoomForHealth(t *testing.T) {
	ev := &fakeEvents{ch: make(chan apitype.Event)}
	s, addr := serveHardened(t, Options{Token: testToken, Events: ev, MaxConns: 32})
	limit := s.streamLimit()
	if limit != 24 {
		t.Fatalf("stream limit with 32 connections = %d, want 24", limit)
	}
	statuses := map[int]int{}
	for range 32 {
		c, br := rawRequest(t, addr, "GET /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+"\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			statuses[0]++
			continue
		}
		statuses[resp.StatusCode]++
		if resp.StatusCode == 503 {
			if resp.Header.Get("Retry-After") == "" {
				t.Errorf("503 without Retry-After")
			}
			resp.Body.Close()
		}
	}
	if statuses[200] != limit || statuses[503] != 32-limit {
		t.Fatalf("32 event streams on a cap of 32 connections: %v, want %d × 200 and %d × 503", statuses, limit, 32-limit)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 50 {
		resp, err := client.Get("http://" + addr + "/api/health")
		if err != nil {
			t.Fatalf("health %d with %d streams open: %v", i, limit, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("health %d = %d", i, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/api/debug/stats", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("authenticated request with %d streams open: %v", limit, err)
	}
	resp.Body.Close()
	if got := s.streams.Load(); got != int64(limit) {
		t.Errorf("streams = %d, want %d", got, limit)
	}
}

func TestStreamLimit(t *testing.T) {
	tests := []struct{ conns, want int }{{32, 24}, {33, 24}, {40, 30}, {128, 96}, {4096, 3072}, {8, 1}, {1, 1}}
	for _, tc := range tests {
		s := &Server{}
		s.conns.Store(newConnLimiter(nil, func() int { return tc.conns }, nil))
		if got := s.streamLimit(); got != tc.want {
			t.Errorf("streamLimit() with a cap of %d = %d, want %d", tc.conns, got, tc.want)
		}
	}
	if got := (&Server{}).streamLimit(); got != 0 {
		t.Errorf("streamLimit() without a limiter = %d, want 0 (none)", got)
	}
}
