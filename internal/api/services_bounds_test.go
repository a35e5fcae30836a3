package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/services"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestServiceBoundsOverHTTP: a value out of bounds is a 400 naming the field
// (never a 500 or a hang), a new name beyond the cap a 409.
func TestServiceBoundsOverHTTP(t *testing.T) {
	state := t.TempDir()
	var sb strings.Builder
	sb.WriteString(`{"services":{`)
	for i := range rules.MaxServices {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"old-%03d":{"name":"old-%03d","command":"true","cwd":"/","status":"stopped","order":%d}`, i, i, i+1)
	}
	sb.WriteString(`},"exposedPort":null}`)
	if err := os.WriteFile(filepath.Join(state, "state.json"), []byte(sb.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := services.New(services.Config{StateDir: state, WorkspaceDir: t.TempDir(), StopTimeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("services.New: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: m, Events: m})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); ts.Close() })

	tests := []struct {
		body      string
		wantCode  int
		wantField string
	}{
		{`{"name":"old-000","command":"sleep 60","stopTimeoutMs":9223372036854}`, 400, "stopTimeoutMs"},
		{`{"name":"old-000","command":"sleep 60","readiness":{"tcp":80,"timeoutMs":9223372036854775807}}`, 400, "readiness.timeoutMs"},
		{`{"name":"old-000","command":"sleep 60","maxRestarts":1001}`, 400, "maxRestarts"},
		{`{"name":"old-000","command":"` + strings.Repeat("a", 70000) + `"}`, 400, "command"},
		{`{"name":"brand-new","command":"sleep 60"}`, 409, ""},
		// At the bounds, with the costliest JSON escaping (6 bytes a byte), the
		// body still fits the body cap: the answer is the manager's, not a 413.
		{`{"name":"old-001","command":"exit 0 #` + strings.Repeat(`\u0001`, rules.MaxCommandBytes-8) +
			`","env":{"E":"` + strings.Repeat(`\u0001`, rules.MaxEnvBytes-1) + `"}}`, 200, ""},
	}
	for _, tt := range tests {
		code, body := authed(t, "POST", ts.URL+"/api/services", tt.body)
		var got struct {
			Error string `json:"error"`
			Field string `json:"field"`
		}
		_ = json.Unmarshal([]byte(body), &got)
		if code != tt.wantCode || got.Field != tt.wantField || (code != 200 && got.Error == "") {
			t.Errorf("POST %.60s… = %d %.200s, want %d with field %q", tt.body, code, body, tt.wantCode, tt.wantField)
		}
		if code == 409 && !strings.Contains(got.Error, `stopped service ("old-000", "old-001", "old-002")`) {
			t.Errorf("409 message %q does not name stopped services to reuse", got.Error)
		}
	}
}
