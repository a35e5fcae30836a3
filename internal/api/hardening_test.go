package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// serveHardened runs s the way the sidecar does (HTTPServer: timeouts and the
// connection limiter) on a loopback listener and returns its address.
func serveHardened(t *testing.T, opts Options) (*Server, string) {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs, lln := s.HTTPServer(ln, nil)
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(lln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		hs.Close()
		<-done
	})
	return s, ln.Addr().String()
}

// rawRequest opens a connection, writes req verbatim and returns the
// connection with a reader of its answers.
func rawRequest(t *testing.T, addr, req string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	return c, bufio.NewReader(c)
}

// readAnswer reads one response; the deadline only keeps a broken server from
// hanging the test (the bug it guards against held answers for 50 s and more).
func readAnswer(t *testing.T, c net.Conn, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// expectClosed checks that the server closes c (EOF or reset), with nothing
// more to read.
func expectClosed(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	n, err := io.Copy(io.Discard, br)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after 20 s (read %d bytes)", n)
	}
}

// Finding 12.1: a request without a token and with a body that never comes
// is answered from its headers, and its connection closed.
func TestUnauthenticatedBodyIsNotAwaited(t *testing.T) {
	_, addr := serveHardened(t, Options{Token: testToken})
	for _, tc := range []struct{ name, req string }{
		{"protected route", "POST /api/services HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"},
		{"wrong token", "POST /api/services HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Length: 100000\r\n\r\n"},
		{"unknown route", "POST /nope HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"},
		{"health with a body", "GET /api/health HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"},
		{"chunked", "POST /api/services HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := rawRequest(t, addr, tc.req)
			resp, body := readAnswer(t, c, br)
			if resp.StatusCode == http.StatusOK && strings.HasPrefix(tc.req, "GET /api/health") {
				// Health needs no token; its connection still closes.
			} else if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusNotFound {
				t.Fatalf("status = %d %s, want 401 or 404", resp.StatusCode, body)
			}
			if !resp.Close {
				t.Errorf("answer has no Connection: close (headers %v)", resp.Header)
			}
			expectClosed(t, c, br)
		})
	}
}

// A client that sent its whole body before reading still reads the 401:
// the server takes in what arrived instead of resetting the connection.
func TestUnauthenticatedSentBodyStillGetsAnswer(t *testing.T) {
	_, addr := serveHardened(t, Options{Token: testToken})
	body := strings.Repeat("x", 200<<10)
	c, br := rawRequest(t, addr, fmt.Sprintf("POST /api/services HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	resp, _ := readAnswer(t, c, br)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status = %d, want 401", resp.StatusCode)
	}
}

// An authorized request that stops sending its body is cut off by the read
// timeout.
func TestAuthorizedRequestReadTimeout(t *testing.T) {
	_, addr := serveHardened(t, Options{Token: testToken, ReadTimeout: 300 * time.Millisecond})
	c, br := rawRequest(t, addr, "POST /api/services HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+
		"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"name\":")
	start := time.Now()
	expectClosed(t, c, br)
	t.Logf("connection closed %v after the request stalled (ReadTimeout 300ms)", time.Since(start).Round(time.Millisecond))
}

// The body cap: 1 MiB by default, refused with a JSON 400 whether announced
// by Content-Length or found while reading; allowBody raises it for one route.
func TestBodyCap(t *testing.T) {
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBodyBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(s.gate)
	read := s.handle(func(w http.ResponseWriter, r *http.Request) error {
		var v map[string]any
		if err := s.decode(w, r, &v); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]int{"keys": len(v)})
		return nil
	})
	r.Post("/capped", read)
	r.With(s.allowBody(1<<20, time.Minute)).Post("/large", read)
	big := `{"k":"` + strings.Repeat("x", 64<<10) + `"}`
	tests := []struct {
		path    string
		chunked bool
		want    int
	}{
		{"/capped", false, 400},
		{"/capped", true, 400},
		{"/large", false, 200},
		{"/large", true, 200},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s chunked=%v", tt.path, tt.chunked), func(t *testing.T) {
			var body io.Reader = strings.NewReader(big)
			if tt.chunked {
				body = io.MultiReader(body) // hides the length: sent chunked
			}
			req, _ := http.NewRequest("POST", tt.path, body)
			req.Header.Set("Authorization", "Bearer "+testToken)
			if !tt.chunked {
				req.ContentLength = int64(len(big))
			}
			rec := newRecorder()
			r.ServeHTTP(rec, req)
			if rec.status != tt.want {
				t.Fatalf("POST %s (%d bytes) = %d %s, want %d", tt.path, len(big), rec.status, rec.body.String(), tt.want)
			}
			if tt.want == 400 && !strings.Contains(rec.body.String(), "too large") {
				t.Errorf("body = %s, want a 'too large' error", rec.body.String())
			}
		})
	}
}

// recorder is a minimal ResponseWriter (httptest.ResponseRecorder lacks
// nothing we need, but MaxBytesReader looks for requestTooLarge only on the
// server's writer, so any writer will do).
type recorder struct {
	h      http.Header
	status int
	body   strings.Builder
}

func newRecorder() *recorder                    { return &recorder{h: http.Header{}} }
func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recorder) WriteHeader(code int)        { r.status = code }

// An SSE stream outlives the read timeout once authenticated.
func TestStreamOutlivesReadTimeout(t *testing.T) {
	ev := &fakeEvents{ch: make(chan apitype.Event)}
	_, addr := serveHardened(t, Options{Token: testToken, Events: ev, ReadTimeout: 200 * time.Millisecond})
	c, br := rawRequest(t, addr, "GET /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+"\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/events: %v %v", resp, err)
	}
	time.Sleep(600 * time.Millisecond) // three read timeouts
	select {
	case ev.ch <- apitype.Event{Type: "started", Service: "late"}:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream ended: nobody takes events")
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read stream: %v", err)
		}
		if strings.Contains(line, `"late"`) {
			break
		}
	}
}

// Finding 12.1 with the connection cap: connections held without a token
// cannot lock out health checks or an authenticated client, whose keep-alive
// connection survives the shedding.
func TestConnLimiterShedsUnauthenticatedFirst(t *testing.T) {
	s, addr := serveHardened(t, Options{Token: testToken, MaxConns: 8})
	// An authenticated keep-alive client, connected first (the oldest).
	tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	// authCheck makes an authenticated request and reports whether it
	// reused the client's kept-alive connection.
	authCheck := func() (reused bool) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/auth/check", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		}))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("authenticated request: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("authenticated request = %d", resp.StatusCode)
		}
		return reused
	}
	authCheck()
	// 40 strangers hold connections with half-sent headers.
	for range 40 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "POST /api/services HTTP/1.1\r\nHost: x\r\n")
	}
	waitFor(t, func() bool { open, _, shed := s.conns.Load().stats(); return open <= 8 && shed >= 32 }, "the limiter to shed")
	// Health from a fresh connection, then the authenticated client again,
	// on the connection it already had.
	for range 5 {
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + addr + "/api/health")
		if err != nil {
			t.Fatalf("health with held connections: %v", err)
		}
		resp.Body.Close()
	}
	if !authCheck() {
		t.Errorf("the authenticated client's keep-alive connection was closed by the limiter")
	}
	open, authn, shed := s.conns.Load().stats()
	t.Logf("open=%d authenticated=%d shed=%d", open, authn, shed)
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// GET /api/debug/stats counts what is open: streams and connections.
func TestDebugStats(t *testing.T) {
	ev := &fakeEvents{ch: make(chan apitype.Event)}
	_, addr := serveHardened(t, Options{Token: testToken, Events: ev, MaxConns: 50})
	stats := func() apitype.DebugStats {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+addr+"/api/debug/stats", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st apitype.DebugStats
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /api/debug/stats = %d, %v", resp.StatusCode, err)
		}
		return st
	}
	st := stats()
	if st.Goroutines < 1 || st.OpenFDs < 3 || st.RSSBytes <= 0 || st.ConnectionLimit != 50 || st.Connections < 1 || st.AuthenticatedConnections < 1 {
		t.Fatalf("stats = %+v, want counts from a live process", st)
	}
	if st.Streams != 0 {
		t.Fatalf("streams = %d before any stream opened", st.Streams)
	}
	c, br := rawRequest(t, addr, "GET /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+"\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /api/events: %v", err)
	}
	if got := stats().Streams; got != 1 {
		t.Errorf("streams = %d with one event stream open, want 1", got)
	}
	c.Close()
	waitFor(t, func() bool { return stats().Streams == 0 }, "the stream count to drop")
}
