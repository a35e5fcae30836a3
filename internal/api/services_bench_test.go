package api

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// benchServer serves a manager with 10 running services.
func benchServer(b *testing.B) (*Server, string) {
	url, m := newServicesServer(b)
	for i := range 10 {
		if _, err := m.Start(b.Context(), apitype.StartServiceRequest{Name: fmt.Sprintf("svc%d", i), Command: "sleep 600"}); err != nil {
			b.Fatal(err)
		}
	}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: m})
	if err != nil {
		b.Fatal(err)
	}
	return s, url
}

// BenchmarkListServicesInProcess: GET /api/services with 10 services, handler only.
func BenchmarkListServicesInProcess(b *testing.B) {
	s, _ := benchServer(b)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("GET", "/api/services", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		for pb.Next() {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

// BenchmarkListServicesLoopback: the same over HTTP/1.1 keep-alive on 127.0.0.1.
func BenchmarkListServicesLoopback(b *testing.B) {
	_, url := benchServer(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req, _ := http.NewRequest("GET", url+"/api/services", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		for pb.Next() {
			resp, err := client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}
