package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRedactSecrets(t *testing.T) {
	jwt := "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl"
	tests := []struct{ name, in, want string }{
		{"anthropic key", "Error with key sk-ant-api03-abc123xyz", "Error with key [REDACTED]"},
		{"github token", "Auth failed with ghp_abc123xyz", "Auth failed with [REDACTED]"},
		{"token in clone url", "Clone from https://x-access-token:secret123@github.com/repo", "Clone from https://[REDACTED]github.com/repo"},
		{"bearer", "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.test", "Authorization: [REDACTED]"},
		{"jwt", "Token: " + jwt, "Token: [REDACTED]"},
		{"api_key", "Config has api_key: secret123abc", "Config has [REDACTED]"},
		{"no secrets", "This is a normal error message without secrets", "This is a normal error message without secrets"},
		{"two keys", "Keys: sk-ant-api03-abc123, ghp_xyz789", "Keys: [REDACTED], [REDACTED]"},
		{"url password", "https://user:abcdefghijklmnopqrstuvwxyz@host/x", "https://user[REDACTED]host/x"},
		// Quirk kept on purpose: the Modal prefixes over-redact ordinary words.
		{"over-redaction of ak-/as-", "has-value and break-point", "h[REDACTED] and bre[REDACTED]"},
		{"e2b case-insensitive", "E2B_abc key", "[REDACTED] key"},
		{"apikey=", "APIKEY='abc'", "[REDACTED]"},
		// One pass of the old code leaves ":abc[REDACTED]defghij@"; the fixed point does not.
		{"second pass joins a password", ":abc:aaaaaaaaaaaaaaaaaaaaaaa@defghij@", "[REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RedactSecrets(tt.in); got != tt.want {
				t.Errorf("RedactSecrets(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzRedactSecrets(f *testing.F) {
	for _, s := range []string{
		"Error with key sk-ant-api03-abc123xyz", "https://x-access-token:secret123@github.com/repo",
		"Authorization: Bearer abc.def", "has-value", ":abc:aaaaaaaaaaaaaaaaaaaaaaa@defghij@",
		"api_key=\"x\"", "e2b_XYZ", "eyJa.eyJb.c", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		once := RedactSecrets(in)
		if twice := RedactSecrets(once); twice != once {
			t.Errorf("RedactSecrets not idempotent on %q: once %q, twice %q", in, once, twice)
		}
		for _, re := range redactPatterns {
			if loc := re.FindStringIndex(once); loc != nil {
				t.Errorf("RedactSecrets(%q) = %q still matches %s", in, once, re)
			}
		}
	})
}

func TestProviderError(t *testing.T) {
	t.Run("ctor echoes inputs", func(t *testing.T) {
		e := NewProviderError(KindE2B, OpCreateSandbox, "Connection failed", true, nil)
		e.StatusCode = 500
		e.Raw = map[string]any{"detail": "x"}
		if e.Provider != KindE2B || e.Operation != OpCreateSandbox || !e.Retryable || e.StatusCode != 500 {
			t.Errorf("NewProviderError = %+v", e)
		}
		if !strings.Contains(e.Error(), "[e2b:createSandbox]") || !strings.Contains(e.Error(), "Connection failed") {
			t.Errorf("Error() = %q", e.Error())
		}
	})
	t.Run("not retryable by default", func(t *testing.T) {
		if e := NewProviderError(KindModal, OpTerminate, "x", false, nil); e.Retryable {
			t.Errorf("Retryable = true, want false")
		}
	})
	t.Run("message redacted", func(t *testing.T) {
		e := NewProviderError(KindE2B, OpCreateSandbox, "Failed with token sk-ant-api03-secret123", false, nil)
		if !strings.Contains(e.Error(), Redacted) || strings.Contains(e.Error(), "sk-ant") {
			t.Errorf("Error() = %q, want the key redacted", e.Error())
		}
	})
	t.Run("cause", func(t *testing.T) {
		cause := errors.New("boom")
		e := NewProviderError(KindE2B, OpCreateSandbox, "x", false, cause)
		if !errors.Is(e, cause) {
			t.Errorf("errors.Is(e, cause) = false")
		}
	})
}

func TestFromResponseBody(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		wantIn     []string
		wantRetry  bool
		wantRawMap bool
	}{
		{"json error 401", 401, `{"error":"Not authorized"}`, []string{"[modal:createSandbox]", "HTTP 401", "Not authorized"}, false, true},
		{"text 500", 500, `Internal Server Error`, []string{"HTTP 500", "Internal Server Error"}, false, false},
		{"429 retryable", 429, `slow down`, []string{"HTTP 429"}, true, false},
		{"503 retryable", 503, `{"message":"unavailable"}`, []string{"unavailable"}, true, true},
		{"400 not retryable", 400, `{"detail":"bad"}`, []string{"bad"}, false, true},
		{"json without known field", 502, `{"code":7}`, []string{`{"code":7}`}, true, true},
		{"json null is text", 500, `null`, []string{"HTTP 500: null"}, false, false},
		{"secret in body redacted", 500, `{"error":"bad key sk-ant-xyz"}`, []string{Redacted}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := FromResponseBody(tt.status, []byte(tt.body), KindModal, OpCreateSandbox)
			for _, s := range tt.wantIn {
				if !strings.Contains(e.Error(), s) {
					t.Errorf("FromResponseBody(%d, %q) = %q, want it to contain %q", tt.status, tt.body, e.Error(), s)
				}
			}
			if e.StatusCode != tt.status || e.Retryable != tt.wantRetry {
				t.Errorf("status, retryable = %d, %v, want %d, %v", e.StatusCode, e.Retryable, tt.status, tt.wantRetry)
			}
			if _, isMap := e.Raw.(map[string]any); isMap != tt.wantRawMap {
				t.Errorf("Raw = %#v, want map %v", e.Raw, tt.wantRawMap)
			}
		})
	}
	t.Run("long text cut at 500 bytes", func(t *testing.T) {
		e := FromResponseBody(500, []byte(strings.Repeat("x", 600)), KindE2B, OpHealth)
		if got := strings.Count(e.Error(), "x"); got != 500 {
			t.Errorf("message has %d x, want 500", got)
		}
	})
}

func TestFromHTTPResponse(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"Not authorized"}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	e := FromHTTPResponse(resp, KindModal, OpCreateSandbox)
	if e.StatusCode != 401 || !strings.Contains(e.Error(), "Not authorized") {
		t.Errorf("FromHTTPResponse = %q (status %d)", e.Error(), e.StatusCode)
	}
}

func TestFromError(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		wantIn    string
		wantRetry bool
	}{
		{"network timeout", errors.New("Network timeout"), "Network timeout", true},
		{"plain", errors.New("Something went wrong"), "Something went wrong", false},
		{"ECONNREFUSED", errors.New("connect ECONNREFUSED 127.0.0.1:1"), "ECONNREFUSED", true},
		{"ETIMEDOUT", errors.New("ETIMEDOUT"), "ETIMEDOUT", true},
		{"fetch failed", errors.New("fetch failed"), "fetch failed", true},
		{"network error", errors.New("network error"), "network error", true},
		{"deadline", fmt.Errorf("call: %w", context.DeadlineExceeded), "deadline", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := FromError(tt.err, KindE2B, OpCreateSandbox)
			if !strings.Contains(e.Error(), tt.wantIn) || e.Retryable != tt.wantRetry {
				t.Errorf("FromError(%q) = %q retryable %v, want containing %q retryable %v", tt.err, e, e.Retryable, tt.wantIn, tt.wantRetry)
			}
			if !errors.Is(e, tt.err) {
				t.Errorf("FromError(%q) does not wrap the original", tt.err)
			}
		})
	}
	// Quirk kept on purpose: an existing ProviderError keeps its own provider and
	// operation, the innermost failure names the error.
	t.Run("existing error passes through", func(t *testing.T) {
		orig := NewProviderError(KindE2B, OpSnapshot, "x", false, nil)
		if got := FromError(orig, KindModal, OpTerminate); got != orig || got.Provider != KindE2B || got.Operation != OpSnapshot {
			t.Errorf("FromError(existing) = %+v, want the same object", got)
		}
	})
}

func TestIsProviderError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", errors.New("x"), false},
		{"provider", NewProviderError(KindE2B, OpHealth, "x", false, nil), true},
		{"wrapped", fmt.Errorf("a: %w", NewProviderError(KindE2B, OpHealth, "x", false, nil)), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsProviderError(tt.err); got != tt.want {
				t.Errorf("IsProviderError(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
