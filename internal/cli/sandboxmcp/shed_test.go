package sandboxmcp

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/internal/terminal"
)

// Issue 28: 64 abandoned v2 terminals locked terminals out for the 5-minute
// grace. The 65th terminal now sheds the session detached the longest.
func TestAbandonedTerminalsDoNotLockOut(t *testing.T) {
	s := sidecartest.Start(t, sidecartest.Build(t), "HOME="+t.TempDir())
	ws := "ws" + strings.TrimPrefix(s.URL, "http") + "/api/terminal"
	hdr := http.Header{"Authorization": {"Bearer " + sidecartest.Token}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	open := func(id string) (*websocket.Conn, error) {
		c, _, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: hdr, Subprotocols: []string{terminal.SubprotocolV2}})
		if err != nil {
			return nil, err
		}
		c.SetReadLimit(terminal.MaxMessage)
		if err := c.Write(ctx, websocket.MessageBinary, terminal.AppendInit(nil, terminal.Init{Session: id, Cols: 80, Rows: 24})); err != nil {
			c.CloseNow()
			return nil, err
		}
		return c, nil
	}
	for i := range 64 {
		c, err := open("abandoned" + strconv.Itoa(i))
		if err != nil {
			t.Fatalf("terminal %d: %v", i, err)
		}
		// Wait until the session exists, then walk away.
		waitStats(t, s, func(st apitype.DebugStats) bool { return st.TerminalSessions == i+1 }, strconv.Itoa(i+1)+" sessions")
		c.CloseNow()
	}
	waitStats(t, s, func(st apitype.DebugStats) bool { return st.Streams == 0 }, "every connection gone")
	c, err := open("fresh")
	if err != nil {
		t.Fatalf("a terminal with 64 abandoned sessions: %v, want it to shed one", err)
	}
	defer c.CloseNow()
	// The session starts once its init frame is read, after the upgrade.
	var ids map[string]bool
	for deadline := time.Now().Add(30 * time.Second); ; {
		var sessions apitype.TerminalSessionsResponse
		if code, err := s.Do("GET", "/api/terminal/sessions", nil, &sessions); err != nil || code != 200 {
			t.Fatalf("GET /api/terminal/sessions = %d, %v", code, err)
		}
		ids = map[string]bool{}
		for _, ss := range sessions.Sessions {
			ids[ss.ID] = true
		}
		if ids["fresh"] || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(ids) != 64 || !ids["fresh"] || ids["abandoned0"] || !ids["abandoned1"] {
		t.Errorf("sessions after the 65th terminal: %d, fresh %v, abandoned0 %v, abandoned1 %v; want 64 with fresh in place of abandoned0",
			len(ids), ids["fresh"], ids["abandoned0"], ids["abandoned1"])
	}
}
