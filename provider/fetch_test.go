package provider

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok":
			io.WriteString(w, "fine")
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/busy":
			http.Error(w, `{"error":"busy"}`, http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	tests := []struct {
		name       string
		path       string
		timeout    time.Duration
		wantBody   string
		wantErr    string
		wantRetry  bool
		wantStatus int
	}{
		{"ok", "/ok", 0, "fine", "", false, 0},
		{"timeout", "/slow", 50 * time.Millisecond, "", "Request timeout after 50ms: " + srv.URL + "/slow", true, 0},
		{"503", "/busy", 0, "", "HTTP 503: busy", true, 503},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+tt.path, nil)
			resp, err := Fetch(t.Context(), srv.Client(), req, KindE2B, OpHealth, tt.timeout)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Fetch: %v", err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != tt.wantBody {
					t.Errorf("body = %q, want %q", b, tt.wantBody)
				}
				return
			}
			var pe *ProviderError
			if !errors.As(err, &pe) || !strings.Contains(pe.Error(), tt.wantErr) || pe.Retryable != tt.wantRetry || pe.StatusCode != tt.wantStatus {
				t.Errorf("Fetch err = %v, want a ProviderError containing %q, retryable %v, status %d", err, tt.wantErr, tt.wantRetry, tt.wantStatus)
			}
		})
	}
	t.Run("caller cancel is not a timeout", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ok", nil)
		_, err := Fetch(ctx, srv.Client(), req, KindE2B, OpHealth, time.Second)
		if err == nil || strings.Contains(err.Error(), "Request timeout") || !errors.Is(err, context.Canceled) {
			t.Errorf("Fetch(canceled) = %v, want a cancellation", err)
		}
	})
	if got := Timeouts().CreateSandbox; got != 180*time.Second {
		t.Errorf("Timeouts().CreateSandbox = %v", got)
	}
}
