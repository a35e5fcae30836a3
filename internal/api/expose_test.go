package api

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// recordingExposer records the port and answers EnsureRouted with routeErr.
type recordingExposer struct {
	mu       sync.Mutex
	port     *int
	routeErr error
	setErr   error
}

func (e *recordingExposer) SetExposedPort(port int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.setErr != nil {
		return e.setErr
	}
	e.port = &port
	return nil
}

func (e *recordingExposer) ExposedPort() *int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.port
}

func (e *recordingExposer) EnsureRouted(ctx context.Context) error { return e.routeErr }

func (e *recordingExposer) ExposeStatus(ctx context.Context) apitype.ExposeStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return apitype.ExposeStatus{ExposedPort: e.port, UpstreamPort: e.port, Upstream: "exposed", CaddyRouted: e.routeErr == nil}
}

func TestExposeValidation(t *testing.T) {
	tests := []struct {
		body       string
		wantStatus int
		wantBody   string
	}{
		{`{"port":3000}`, 200, `{"success":true,"exposedPort":3000}`},
		{`{"port":1}`, 200, `{"success":true,"exposedPort":1}`},
		{`{"port":65535}`, 200, `{"success":true,"exposedPort":65535}`},
		{`{"port":3e3}`, 200, `{"success":true,"exposedPort":3000}`},
		{`{"port":-7}`, 400, `{"error":"port must be an integer between 1 and 65535"}`},
		{`{"port":0}`, 400, `{"error":"port must be an integer between 1 and 65535"}`},
		{`{"port":4.5}`, 400, `{"error":"port must be an integer between 1 and 65535"}`},
		{`{"port":70000}`, 400, `{"error":"port must be an integer between 1 and 65535"}`},
		{`{"port":1e400}`, 400, `{"error":"port must be an integer between 1 and 65535"}`},
		{`{"port":"80"}`, 400, `{"error":"port must be a number"}`},
		{`{}`, 400, `{"error":"port must be a number"}`},
		{`{"port":null}`, 400, `{"error":"port must be a number"}`},
		{`{"port":true}`, 400, `{"error":"port must be a number"}`},
		{`{"port":[3000]}`, 400, `{"error":"port must be a number"}`},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			e := &recordingExposer{}
			ts := newTestServer(t, Options{Token: testToken, Expose: e})
			resp, body := do(t, "POST", ts.URL+"/api/expose", "Bearer "+testToken, tt.body)
			if resp.StatusCode != tt.wantStatus || strings.TrimSpace(body) != tt.wantBody {
				t.Errorf("POST /api/expose %s = %d %s, want %d %s", tt.body, resp.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			if tt.wantStatus != 200 && e.port != nil {
				t.Errorf("POST /api/expose %s recorded port %d, want nothing recorded", tt.body, *e.port)
			}
		})
	}
}

func TestExposeCaddyFailureIs502WithPort(t *testing.T) {
	e := &recordingExposer{routeErr: errors.New("reach caddy admin endpoint unix//x.sock: connection refused")}
	ts := newTestServer(t, Options{Token: testToken, Expose: e})
	resp, body := do(t, "POST", ts.URL+"/api/expose", "Bearer "+testToken, `{"port":5173}`)
	if resp.StatusCode != 502 {
		t.Fatalf("POST /api/expose = %d %s, want 502", resp.StatusCode, body)
	}
	var got struct {
		Error       string `json:"error"`
		ExposedPort int    `json:"exposedPort"`
		Success     *bool  `json:"success"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.ExposedPort != 5173 || got.Success != nil || !strings.Contains(got.Error, "connection refused") {
		t.Errorf("502 body = %s, want exposedPort 5173, no success, and the cause in error", body)
	}
	if e.port == nil || *e.port != 5173 {
		t.Errorf("recorded port = %v, want 5173 even though Caddy failed", e.port)
	}
}

func TestExposeStoreFailureIs500(t *testing.T) {
	e := &recordingExposer{setErr: errors.New("disk full")}
	ts := newTestServer(t, Options{Token: testToken, Expose: e})
	resp, body := do(t, "POST", ts.URL+"/api/expose", "Bearer "+testToken, `{"port":3000}`)
	if resp.StatusCode != 500 || !strings.Contains(body, "disk full") {
		t.Errorf("POST /api/expose with a failing store = %d %s, want a 500 naming the cause", resp.StatusCode, body)
	}
}

func TestExposeStatus(t *testing.T) {
	e := &recordingExposer{}
	ts := newTestServer(t, Options{Token: testToken, Expose: e})
	do(t, "POST", ts.URL+"/api/expose", "Bearer "+testToken, `{"port":8000}`)
	resp, body := do(t, "GET", ts.URL+"/api/expose", "Bearer "+testToken, "")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/expose = %d %s", resp.StatusCode, body)
	}
	var got apitype.ExposeStatus
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	port := 8000
	want := apitype.ExposeStatus{ExposedPort: &port, UpstreamPort: &port, Upstream: "exposed", CaddyRouted: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET /api/expose (-want +got):\n%s", diff)
	}
}

func TestExposeWithoutExposerIs501(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken})
	for _, m := range []string{"GET", "POST"} {
		resp, body := do(t, m, ts.URL+"/api/expose", "Bearer "+testToken, `{"port":3000}`)
		if resp.StatusCode != 501 {
			t.Errorf("%s /api/expose without an Exposer = %d %s, want 501", m, resp.StatusCode, body)
		}
	}
}

// FuzzParsePort: any JSON value is a port 1–65535 or a 400, never a panic.
func FuzzParsePort(f *testing.F) {
	for _, s := range []string{`3000`, `-7`, `0`, `4.5`, `70000`, `"80"`, `null`, `1e400`, `3e3`, `[]`, `-0`, `65535.0000000001`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := parsePort(raw)
		if err != nil {
			var e *fault.Error
			if !errors.As(err, &e) || e.Status != 400 {
				t.Fatalf("parsePort(%q) = %v, want a 400 *Error", raw, err)
			}
			return
		}
		if p < 1 || p > 65535 {
			t.Fatalf("parsePort(%q) = %d, want 1–65535", raw, p)
		}
	})
}
