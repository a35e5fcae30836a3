package api

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
)

// wantCORSHeaders are the headers the contract puts on every response.
var wantCORSHeaders = map[string]string{
	"Access-Control-Allow-Origin":  "*",
	"Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
	"Access-Control-Allow-Headers": "Content-Type, Authorization",
}

func TestCORSOnEveryResponse(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken, Expose: &recordingExposer{}})
	tests := []struct {
		method, path, auth, body string
		wantStatus               int
	}{
		{"GET", "/api/health", "", "", 200},
		{"GET", "/api/auth/check", "Bearer " + testToken, "", 200},
		{"GET", "/api/services", "", "", 401},
		{"GET", "/api/services", "Bearer nope", "", 401},
		{"GET", "/api/nope", "Bearer " + testToken, "", 404},
		{"PUT", "/api/services", "Bearer " + testToken, "", 405},
		{"POST", "/api/expose", "Bearer " + testToken, `{"port":"x"}`, 400},
		{"POST", "/api/expose", "Bearer " + testToken, `{`, 400},
		{"GET", "/api/services", "Bearer " + testToken, "", 501},
		{"OPTIONS", "/api/services/x%2Fy/../z", "", "", 200},
		{"OPTIONS", "/", "", "", 200},
	}
	for _, tt := range tests {
		resp, body := do(t, tt.method, ts.URL+tt.path, tt.auth, tt.body)
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("%s %s = %d %s, want %d", tt.method, tt.path, resp.StatusCode, body, tt.wantStatus)
		}
		for k, v := range wantCORSHeaders {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s %s (%d): %s = %q, want %q", tt.method, tt.path, resp.StatusCode, k, got, v)
			}
		}
		if tt.method != "OPTIONS" && !strings.HasPrefix(body, "{") {
			t.Errorf("%s %s body = %q, want JSON", tt.method, tt.path, body)
		}
	}
}

func TestBadBodiesAre400JSON(t *testing.T) {
	e := &recordingExposer{}
	ts := newTestServer(t, Options{Token: testToken, Expose: e, MaxBodyBytes: 1 << 10})
	tests := []struct {
		name, contentType, body, wantError string
	}{
		{"oversized", "application/json", `{"port":3000,"pad":"` + strings.Repeat("x", 4<<10) + `"}`, "request body too large (limit 1024 bytes)"},
		{"html content type", "text/html", `{"port":3000}`, "Content-Type must be application/json"},
		{"form", "application/x-www-form-urlencoded", "port=3000", "Content-Type must be application/json"},
		{"garbage content type", ";;;", `{"port":3000}`, "Content-Type must be application/json"},
		{"binary", "application/json", "\x00\xff\xfe", ""},
		{"empty", "application/json", "", "request body must be a JSON object"},
	}
	for _, tt := range tests {
		req, _ := http.NewRequest("POST", ts.URL+"/api/expose", strings.NewReader(tt.body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", tt.contentType)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.HasPrefix(b.String(), `{"error":"`) {
			t.Errorf("%s: POST /api/expose = %d %s, want 400 JSON", tt.name, resp.StatusCode, b.String())
		}
		if tt.wantError != "" && strings.TrimSpace(b.String()) != `{"error":"`+tt.wantError+`"}` {
			t.Errorf("%s: body = %s, want error %q", tt.name, b.String(), tt.wantError)
		}
	}
	if e.port != nil {
		t.Errorf("a bad body recorded port %d", *e.port)
	}
	if resp, _ := do(t, "GET", ts.URL+"/api/health", "", ""); resp.StatusCode != 200 {
		t.Errorf("GET /api/health after bad bodies = %d, want 200", resp.StatusCode)
	}
}

// namedServices records the names the handlers pass to the manager.
type namedServices struct {
	mu    sync.Mutex
	names []string
}

func (n *namedServices) record(name string) error {
	n.mu.Lock()
	n.names = append(n.names, name)
	n.mu.Unlock()
	return services.ValidateName(name)
}

func (n *namedServices) List() []apitype.ServiceInfo { return nil }
func (n *namedServices) Get(name string) (apitype.ServiceInfo, error) {
	return apitype.ServiceInfo{Name: name}, n.record(name)
}
func (n *namedServices) Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error) {
	return apitype.ServiceInfo{Name: req.Name}, n.record(req.Name)
}
func (n *namedServices) Stop(ctx context.Context, name string) error { return n.record(name) }
func (n *namedServices) Restart(ctx context.Context, name string) (apitype.ServiceInfo, error) {
	return apitype.ServiceInfo{Name: name}, n.record(name)
}

// TestNameInPathIsUnescaped checks that a percent-encoded name in a path
// reaches the manager decoded, as the old sidecar decoded it.
func TestNameInPathIsUnescaped(t *testing.T) {
	tests := []struct {
		method, path, wantName string
		wantStatus             int
	}{
		{"DELETE", "/api/services/w%65b", "web", 200},
		{"GET", "/api/services/my%2Esvc", "my.svc", 200},
		{"POST", "/api/services/my%2Dsvc/restart", "my-svc", 200},
		{"DELETE", "/api/services/a%2Fb", "a/b", 400},
		{"DELETE", "/api/services/%2E%2E", "..", 400},
	}
	for _, tt := range tests {
		svc := &namedServices{}
		ts := newTestServer(t, Options{Token: testToken, Services: svc})
		resp, body := do(t, tt.method, ts.URL+tt.path, "Bearer "+testToken, "")
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("%s %s = %d %s, want %d", tt.method, tt.path, resp.StatusCode, body, tt.wantStatus)
		}
		if len(svc.names) > 0 && svc.names[0] != tt.wantName {
			t.Errorf("%s %s reached the manager as %q, want %q", tt.method, tt.path, svc.names[0], tt.wantName)
		}
	}
}
