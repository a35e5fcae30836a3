package api

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

const testToken = "test-token"

func newTestServer(t *testing.T, opts Options) *httptest.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); ts.Close() })
	return ts
}

func do(t *testing.T, method, url, auth string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestAuthMatrix(t *testing.T) {
	tests := []struct {
		name       string
		token      string
		header     string
		wantStatus int
	}{
		{"no token configured, no header", "", "", 401},
		{"no token configured, empty bearer", "", "Bearer ", 401},
		{"no token configured, any bearer", "", "Bearer x", 401},
		{"missing header", testToken, "", 401},
		{"wrong token", testToken, "Bearer nope", 401},
		{"token without Bearer", testToken, testToken, 401},
		{"prefix of token", testToken, "Bearer test", 401},
		{"right token", testToken, "Bearer " + testToken, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newTestServer(t, Options{Token: tt.token})
			resp, body := do(t, "GET", ts.URL+"/api/auth/check", tt.header, "")
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("GET /api/auth/check with %q = %d %s, want %d", tt.header, resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantStatus == 401 && strings.TrimSpace(body) != `{"error":"Unauthorized"}` {
				t.Errorf("401 body = %s, want {\"error\":\"Unauthorized\"}", body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
		})
	}
}

func TestHealthNeedsNoAuth(t *testing.T) {
	ts := newTestServer(t, Options{})
	resp, body := do(t, "GET", ts.URL+"/api/health", "", "")
	if resp.StatusCode != 200 || strings.TrimSpace(body) != `{"status":"ok"}` {
		t.Fatalf("GET /api/health = %d %s, want 200 {\"status\":\"ok\"}", resp.StatusCode, body)
	}
}

func TestAuthCheckIgnoresEverythingButAuthorization(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken})
	req, _ := http.NewRequest("GET", ts.URL+"/api/auth/check?token=x&a=b", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Uri", "/_proliferate/vscode/?x=1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("auth check with Upgrade: websocket = %d, want 200", resp.StatusCode)
	}
}

func TestCORSPreflight(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken})
	for _, path := range []string{"/api/services", "/api/expose", "/api/anything"} {
		resp, _ := do(t, "OPTIONS", ts.URL+path, "", "")
		if resp.StatusCode != 200 {
			t.Errorf("OPTIONS %s = %d, want 200", path, resp.StatusCode)
		}
		want := map[string]string{
			"Access-Control-Allow-Origin":  "*",
			"Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
			"Access-Control-Allow-Headers": "Content-Type, Authorization",
		}
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("OPTIONS %s: %s = %q, want %q", path, k, got, v)
			}
		}
	}
	resp, _ := do(t, "GET", ts.URL+"/api/health", "", "")
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "*" {
		t.Errorf("GET /api/health: Access-Control-Allow-Origin = %q, want *", got)
	}
}

func TestUnknownRouteIsJSON404(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken})
	resp, body := do(t, "GET", ts.URL+"/nope", "Bearer "+testToken, "")
	if resp.StatusCode != 404 || !strings.HasPrefix(body, `{"error":`) {
		t.Fatalf("GET /nope = %d %s, want 404 JSON", resp.StatusCode, body)
	}
}

func TestDecodeJSON(t *testing.T) {
	type req struct {
		Name string `json:"name"`
		Port int    `json:"port"`
	}
	tests := []struct {
		name, body string
		wantErr    bool
	}{
		{"object", `{"name":"a"}`, false},
		{"empty", ``, true},
		{"spaces", `   `, true},
		{"truncated", `{"name":`, true},
		{"wrong type", `{"name":5}`, true},
		{"trailing", `{"name":"a"} {}`, true},
		{"array", `[1]`, true},
		{"html", `<html>`, true},
		{"unknown fields allowed", `{"name":"a","extra":1}`, false},
	}
	for _, tt := range tests {
		var v req
		err := decodeJSON([]byte(tt.body), &v)
		if (err != nil) != tt.wantErr {
			t.Errorf("decodeJSON(%q) error = %v, wantErr %v", tt.body, err, tt.wantErr)
		}
		if err != nil {
			if e, ok := err.(*fault.Error); !ok || e.Status != 400 {
				t.Errorf("decodeJSON(%q) error = %#v, want *fault.Error with status 400", tt.body, err)
			}
		}
	}
}

// TestTrailingSlashAndHead: the old server answered "/api/health/" and HEAD
// like their GET counterparts; callers may depend on it.
func TestTrailingSlashAndHead(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken})
	tests := []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/api/health/", "", 200},
		{"HEAD", "/api/health", "", 200},
		{"GET", "/api/auth/check/", "Bearer " + testToken, 200},
		{"HEAD", "/api/auth/check", "Bearer " + testToken, 200},
		{"HEAD", "/api/auth/check", "", 401},
		{"GET", "/api/auth/check/", "", 401},
	}
	for _, tt := range tests {
		resp, _ := do(t, tt.method, ts.URL+tt.path, tt.auth, "")
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s (auth %q) = %d, want %d", tt.method, tt.path, tt.auth, resp.StatusCode, tt.want)
		}
	}
}
