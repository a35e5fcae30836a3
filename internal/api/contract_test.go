package api

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// corsHeaders are the headers the contract puts on every response.
var corsHeaders = map[string]string{
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
		for k, v := range corsHeaders {
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
