package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/terminal"
)

func newTerminalServer(t *testing.T) (base, wsURL string) {
	return newTerminalServerMax(t, 0)
}

func newTerminalServerMax(t *testing.T, maxSessions int) (base, wsURL string) {
	t.Helper()
	term, err := terminal.New(terminal.Options{
		Dir:         t.TempDir(),
		Command:     []string{"bash", "--norc", "--noprofile"},
		Env:         append(os.Environ(), "PS1=$ "),
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		MaxSessions: maxSessions,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = term.Close() })
	ts := newTestServer(t, Options{Token: testToken, Terminal: term})
	return ts.URL, "ws" + strings.TrimPrefix(ts.URL, "http") + "/api/terminal"
}

func dialTerminal(t *testing.T, url string, header http.Header, subprotocols ...string) (*websocket.Conn, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header, Subprotocols: subprotocols})
	if c != nil {
		t.Cleanup(func() { c.CloseNow() })
	}
	return c, resp, err
}

func authHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + testToken}}
}

func TestTerminalNeedsAuthBeforeUpgrade(t *testing.T) {
	_, url := newTerminalServer(t)
	for _, h := range []http.Header{nil, {"Authorization": {"Bearer nope"}}} {
		_, resp, err := dialTerminal(t, url, h)
		if err == nil {
			t.Fatalf("dial with %v upgraded, want 401", h)
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("dial with %v: response %v, want 401 without upgrade", h, resp)
		}
		if got := resp.Header.Get("Upgrade"); got != "" {
			t.Errorf("401 response has Upgrade: %q", got)
		}
	}
}

func TestTerminalV1EchoThroughRouter(t *testing.T) {
	_, url := newTerminalServer(t)
	c, _, err := dialTerminal(t, url, authHeader())
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != "" {
		t.Errorf("subprotocol = %q, want none (v1)", c.Subprotocol())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte("echo __M$((40+2))__\r")); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "__M42__") {
		typ, p, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v; output so far %q", err, out.String())
		}
		if typ != websocket.MessageText {
			t.Fatalf("v1 frame type = %v, want text", typ)
		}
		out.Write(p)
	}
}

func TestTerminalV2AndSessionsListing(t *testing.T) {
	base, url := newTerminalServer(t)
	c, _, err := dialTerminal(t, url, authHeader(), terminal.SubprotocolV2)
	if err != nil {
		t.Fatal(err)
	}
	if c.Subprotocol() != terminal.SubprotocolV2 {
		t.Fatalf("subprotocol = %q, want %q", c.Subprotocol(), terminal.SubprotocolV2)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageBinary, terminal.AppendInit(nil, terminal.Init{Session: "ops", Cols: 90, Rows: 30})); err != nil {
		t.Fatal(err)
	}
	if _, p, err := c.Read(ctx); err != nil || len(p) == 0 || p[0] != terminal.FrameReady {
		t.Fatalf("first frame = %q, %v, want a ready frame", p, err)
	}

	resp, body := do(t, "GET", base+"/api/terminal/sessions", "Bearer "+testToken, "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/terminal/sessions = %d %s", resp.StatusCode, body)
	}
	var got apitype.TerminalSessionsResponse
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Sessions) != 1 {
		t.Fatalf("sessions = %s, want one", body)
	}
	s := got.Sessions[0]
	if s.ID != "ops" || s.Cols != 90 || s.Rows != 30 || s.Clients != 1 || s.PID <= 0 || s.Protocol != "v2" || s.CreatedAt == 0 || s.LastActivityAt < s.CreatedAt {
		t.Errorf("session = %+v, want ops 90x30 with one client", s)
	}
}

func TestTerminalPlainGETIsJSON426(t *testing.T) {
	base, _ := newTerminalServer(t)
	resp, body := do(t, "GET", base+"/api/terminal", "Bearer "+testToken, "")
	if resp.StatusCode != http.StatusUpgradeRequired || !strings.HasPrefix(body, `{"error":`) {
		t.Errorf("GET /api/terminal without Upgrade = %d %s, want 426 JSON", resp.StatusCode, body)
	}
}

func TestTerminalNotConfigured(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken})
	for _, path := range []string{"/api/terminal", "/api/terminal/sessions"} {
		resp, body := do(t, "GET", ts.URL+path, "Bearer "+testToken, "")
		if resp.StatusCode != http.StatusNotImplemented || !strings.HasPrefix(body, `{"error":`) {
			t.Errorf("GET %s without a terminal = %d %s, want 501 JSON", path, resp.StatusCode, body)
		}
	}
}

// TestTerminalBadHandshakeIsJSON checks that a malformed WebSocket handshake
// gets the API's JSON error, not the WebSocket library's plain text.
func TestTerminalBadHandshakeIsJSON(t *testing.T) {
	base, _ := newTerminalServer(t)
	tests := []struct {
		name       string
		header     map[string]string
		wantStatus int
	}{
		{"no Connection: Upgrade", map[string]string{"Upgrade": "websocket"}, 426},
		{"old version", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "8", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}, 400},
		{"no key", map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"}, 400},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("GET", base+"/api/terminal", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		for k, v := range tt.header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e apitype.ErrorResponse
		if resp.StatusCode != tt.wantStatus || resp.Header.Get("Content-Type") != "application/json" || json.Unmarshal(b, &e) != nil || e.Error == "" {
			t.Errorf("%s: GET /api/terminal = %d %s %q, want %d with a JSON error", tt.name, resp.StatusCode, resp.Header.Get("Content-Type"), b, tt.wantStatus)
		}
	}
}

// Finding 12.8: past the session cap the upgrade is refused with a JSON 503
// naming the cap; room comes back when a session ends.
func TestTerminalSessionCap(t *testing.T) {
	_, url := newTerminalServerMax(t, 2)
	var open []*websocket.Conn
	for range 2 {
		c, _, err := dialTerminal(t, url, authHeader())
		if err != nil {
			t.Fatalf("dial under the cap: %v", err)
		}
		open = append(open, c)
	}
	for _, proto := range [][]string{nil, {terminal.SubprotocolV2}} {
		_, resp, err := dialTerminal(t, url, authHeader(), proto...)
		if err == nil {
			t.Fatalf("dial %v past the cap upgraded, want 503", proto)
		}
		if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("dial %v past the cap: %v, want 503", proto, resp)
		}
		var body struct{ Error string }
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || !strings.Contains(body.Error, "limit is 2") {
			t.Errorf("503 body error = %q (%v), want one naming the limit 2", body.Error, err)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("503 Content-Type = %q", ct)
		}
	}
	// One shell exits; its room is free again once it is gone.
	_ = open[0].Write(t.Context(), websocket.MessageText, []byte("exit\r"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, _, err := dialTerminal(t, url, authHeader())
		if err == nil {
			c.CloseNow()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no room after a shell exited: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
