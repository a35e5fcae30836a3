package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newClient(t *testing.T, h http.Handler, o Options) *Client {
	t.Helper()
	if h != nil {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		o.BaseURL = srv.URL
	}
	if o.Token == "" {
		o.Token = "tok"
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = time.Millisecond
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNew(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:4000", "ftp://x", "http://"} {
		if _, err := New(Options{BaseURL: u}); err == nil {
			t.Errorf("New(%q) = nil error, want one", u)
		}
	}
}

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		status  int
		body    string
		message bool
		want    string
	}{
		{404, `{"error":"Service \"x\" not found"}`, false, `Service "x" not found`},
		{500, `{"message":"boom"}`, false, "HTTP 500"},
		{500, `{"message":"boom"}`, true, "boom"},
		{500, `{"error":"e","message":"m"}`, true, "e"},
		{502, `<html>`, true, "HTTP 502"},
		{400, `{"error":42}`, false, "HTTP 400"},
		{400, `{"error":""}`, false, "HTTP 400"},
		{401, ``, false, "HTTP 401"},
	}
	for _, tc := range tests {
		if got := ErrorMessage(tc.status, []byte(tc.body), tc.message); got != tc.want {
			t.Errorf("ErrorMessage(%d, %q, %v) = %q, want %q", tc.status, tc.body, tc.message, got, tc.want)
		}
	}
}

func TestTypedCalls(t *testing.T) {
	var gotStart apitype.StartServiceRequest
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(401)
			io.WriteString(w, `{"error":"Unauthorized"}`)
			return
		}
		switch r.Method + " " + r.URL.RequestURI() {
		case "GET /api/health":
			io.WriteString(w, `{"status":"ok"}`)
		case "GET /api/services":
			io.WriteString(w, `{"services":[{"name":"web","status":"running","pid":7}],"exposedPort":3000}`)
		case "GET /api/services/a%20b":
			io.WriteString(w, `{"service":{"name":"a b","ready":true}}`)
		case "POST /api/services":
			if r.Header.Get("Content-Type") != "application/json" {
				w.WriteHeader(400)
				return
			}
			json.NewDecoder(r.Body).Decode(&gotStart)
			io.WriteString(w, `{"service":{"name":"web","status":"running"}}`)
		case "DELETE /api/services/gone":
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"Service \"gone\" not found"}`)
		case "POST /api/services/web/restart":
			io.WriteString(w, `{"service":{"name":"web","restarts":1}}`)
		case "POST /api/expose":
			w.WriteHeader(502)
			io.WriteString(w, `{"error":"caddy unreachable","exposedPort":3000}`)
		case "GET /api/logs/web?tail=2":
			io.WriteString(w, `{"lines":["a","b"]}`)
		case "GET /api/git/status?repo=L3c%2B":
			io.WriteString(w, `{"branch":"main","ahead":1,"behind":0,"files":[{"status":"?","path":"x"}]}`)
		case "GET /api/git/diff?path=a%26b&repo=id":
			io.WriteString(w, `{"diff":"d"}`)
		case "GET /api/git/repos":
			io.WriteString(w, `{"repos":[{"id":"aWQ=","path":"/w"}]}`)
		default:
			w.WriteHeader(404)
			fmt.Fprintf(w, "Cannot %s %s", r.Method, r.URL.RequestURI())
		}
	})
	c := newClient(t, mux, Options{})
	ctx := t.Context()

	if h, err := c.Health(ctx); err != nil || h.Status != "ok" {
		t.Errorf("Health() = %v, %v", h, err)
	}
	list, err := c.ListServices(ctx)
	if err != nil || len(list.Services) != 1 || list.Services[0].PID != 7 || *list.ExposedPort != 3000 {
		t.Errorf("ListServices() = %+v, %v", list, err)
	}
	if s, err := c.GetService(ctx, "a b"); err != nil || !s.Ready {
		t.Errorf("GetService() = %+v, %v", s, err)
	}
	tcp := 3000
	req := apitype.StartServiceRequest{Name: "web", Command: "npm run dev", Readiness: &apitype.Readiness{TCP: &tcp}}
	if _, err := c.StartService(ctx, req); err != nil {
		t.Errorf("StartService() = %v", err)
	}
	if d := cmp.Diff(req, gotStart); d != "" {
		t.Errorf("start body (-want +got):\n%s", d)
	}
	err = c.StopService(ctx, "gone")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Message != `Service "gone" not found` || !ae.JSON() {
		t.Errorf("StopService(gone) = %#v", err)
	}
	if s, err := c.RestartService(ctx, "web"); err != nil || s.Restarts != 1 {
		t.Errorf("RestartService() = %+v, %v", s, err)
	}
	_, err = c.Expose(ctx, 3000)
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Message != "caddy unreachable" || !strings.Contains(string(ae.Body), `"exposedPort":3000`) {
		t.Errorf("Expose() = %#v", err)
	}
	if lines, err := c.LogTail(ctx, "web", 2); err != nil || !cmp.Equal(lines, []string{"a", "b"}) {
		t.Errorf("LogTail() = %q, %v", lines, err)
	}
	if st, err := c.GitStatus(ctx, "L3c+"); err != nil || st.Branch != "main" || len(st.Files) != 1 {
		t.Errorf("GitStatus() = %+v, %v", st, err)
	}
	if d, err := c.GitDiff(ctx, "id", "a&b"); err != nil || d != "d" {
		t.Errorf("GitDiff() = %q, %v", d, err)
	}
	if repos, err := c.GitRepos(ctx); err != nil || len(repos) != 1 {
		t.Errorf("GitRepos() = %v, %v", repos, err)
	}
	_, err = c.ExposeStatus(ctx)
	if !errors.As(err, &ae) || ae.Status != 404 || ae.JSON() || ae.Message != "HTTP 404" {
		t.Errorf("ExposeStatus() against an old server = %#v", err)
	}
	bad := newClient(t, mux, Options{Token: "nope"})
	if err := bad.AuthCheck(ctx); !errors.As(err, &ae) || ae.Status != 401 {
		t.Errorf("AuthCheck() with a wrong token = %v", err)
	}
}

func closedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := "http://" + ln.Addr().String()
	ln.Close()
	return u
}

func TestRetryRefused(t *testing.T) {
	c := newClient(t, nil, Options{BaseURL: closedURL(t), Retries: 3, RetryDelay: 20 * time.Millisecond})
	start := time.Now()
	_, err := c.Health(t.Context())
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Health() = %v, want connection refused", err)
	}
	if el := time.Since(start); el < 60*time.Millisecond {
		t.Errorf("Health() gave up after %v, want 3 retries 20ms apart", el)
	}

	never := newClient(t, nil, Options{BaseURL: closedURL(t), Retries: -1, RetryDelay: time.Hour})
	if _, err := never.Health(t.Context()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Health() without retries = %v", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	slow := newClient(t, nil, Options{BaseURL: closedURL(t), RetryDelay: time.Hour})
	if _, err := slow.Health(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Health() cancelled while retrying = %v, want deadline exceeded", err)
	}
}

func TestRetryUntilUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"ok"}`)
	})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(300 * time.Millisecond)
		if ln, err := net.Listen("tcp", addr); err == nil {
			srv.Serve(ln)
		}
	}()
	t.Cleanup(func() { srv.Close(); <-done })
	c := newClient(t, nil, Options{BaseURL: "http://" + addr, RetryDelay: 100 * time.Millisecond})
	if h, err := c.Health(t.Context()); err != nil || h.Status != "ok" {
		t.Errorf("Health() against a late server = %v, %v", h, err)
	}
}

func TestRequestTimeout(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	c := newClient(t, h, Options{Timeout: 50 * time.Millisecond})
	if _, err := c.ListServices(t.Context()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ListServices() against a hung server = %v, want deadline exceeded", err)
	}
}

func TestStreamHasNoTimeout(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range 4 {
			fmt.Fprintf(w, "data: {\"type\":\"append\",\"content\":\"%d\"}\n\n", i)
			rc.Flush()
			time.Sleep(40 * time.Millisecond)
		}
	})
	c := newClient(t, h, Options{Timeout: 30 * time.Millisecond})
	var got []string
	err := c.Logs(t.Context(), "web", func(raw []byte, f apitype.LogFrame) error {
		got = append(got, f.Content)
		return nil
	})
	if err != nil || !cmp.Equal(got, []string{"0", "1", "2", "3"}) {
		t.Errorf("Logs() = %q, %v; want all four frames past the request timeout", got, err)
	}
}

func TestStreamStopAndErrors(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/logs/none" {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"No logs found for service \"none\""}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, ": hi\n\ndata: {\"type\":\"started\",\"service\":\"web\",\"time\":1}\n\n")
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	})
	c := newClient(t, h, Options{})
	var got []apitype.Event
	err := c.Events(t.Context(), func(e apitype.Event) error {
		got = append(got, e)
		return ErrStop
	})
	if err != nil || len(got) != 1 || got[0].Service != "web" {
		t.Errorf("Events() = %+v, %v", got, err)
	}
	var ae *APIError
	if err := c.Logs(t.Context(), "none", nil); !errors.As(err, &ae) || ae.Message != `No logs found for service "none"` {
		t.Errorf("Logs(none) = %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := c.Logs(ctx, "web", func([]byte, apitype.LogFrame) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Logs() until the context ends = %v", err)
	}
	boom := errors.New("boom")
	if err := c.Logs(t.Context(), "web", func([]byte, apitype.LogFrame) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Logs() with a failing callback = %v", err)
	}
}

func TestEventReader(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"data: a\n\n", []string{"a"}},
		{"data:a\n\ndata:  b\n\n", []string{"a", " b"}},
		{"data: a\ndata: b\n\n", []string{"a\nb"}},
		{": comment\n\nevent: x\nid: 1\ndata: a\n\n", []string{"a"}},
		{"data: a\r\n\r\ndata: b\r\rdata: c\n\n", []string{"a", "b", "c"}},
		{"\n\n\ndata\n\n", []string{""}},
		{"data: a\n", nil},
		{"data: a", nil},
		{"retry: 5\n\n", nil},
		{"data: {\"content\":\"x: y\"}\n\n", []string{`{"content":"x: y"}`}},
	}
	for _, tc := range tests {
		r := NewEventReader(strings.NewReader(tc.in))
		var got []string
		for {
			d, err := r.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("Next(%q) error %v", tc.in, err)
				}
				break
			}
			got = append(got, string(d))
		}
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("events of %q (-want +got):\n%s", tc.in, d)
		}
	}
}

func FuzzEventReader(f *testing.F) {
	for _, s := range []string{"data: a\n\n", "data: a\r\ndata: b\r\n\r\n", ": x\n", "data", "\r\r\r", "data: {\"type\":\"append\"}\n\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := NewEventReader(strings.NewReader(s))
		for range len(s) + 1 {
			d, err := r.Next()
			if err != nil {
				return
			}
			if len(d) > len(s) {
				t.Fatalf("event of %d bytes from %d bytes of input", len(d), len(s))
			}
		}
		t.Fatalf("more events than input bytes in %q", s)
	})
}
