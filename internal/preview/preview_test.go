package preview

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newProxy(t testing.TB, opts Options) (*Proxy, string) {
	t.Helper()
	opts.Logger = quietLogger()
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	p, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	return p, srv.URL
}

func get(t testing.TB, url string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestProxyToExposedPort(t *testing.T) {
	a := testutil.EchoApp(t, "a")
	p, url := newProxy(t, Options{FallbackPorts: []int{}})
	p.SetPort(a)
	resp, body := get(t, url+"/path?q=1", http.Header{"X-Forwarded-For": {"203.0.113.7"}})
	if resp.StatusCode != 200 || body != "a" {
		t.Fatalf("GET = %d %q, want 200 %q", resp.StatusCode, body, "a")
	}
	for _, h := range []string{"X-Frame-Options", "Content-Security-Policy"} {
		if v := resp.Header.Get(h); v != "" {
			t.Errorf("response %s = %q, want it removed", h, v)
		}
	}
	if got, want := resp.Header.Get("X-Seen-Host"), "127.0.0.1:"+strconv.Itoa(a); got != want {
		t.Errorf("upstream saw Host %q, want %q", got, want)
	}
	if got := resp.Header.Get("X-Seen-Forwarded-For"); !strings.HasPrefix(got, "203.0.113.7, ") {
		t.Errorf("upstream saw X-Forwarded-For %q, want Caddy's value first", got)
	}
	if port, src := p.Upstream(t.Context()); port != a || src != SourceExposed {
		t.Errorf("Upstream() = %d, %q; want %d, %q", port, src, a, SourceExposed)
	}
}

func TestFallbackPicksFirstListeningPort(t *testing.T) {
	dead, b, c := testutil.FreePort(t), testutil.EchoApp(t, "b"), testutil.EchoApp(t, "c")
	p, url := newProxy(t, Options{FallbackPorts: []int{dead, b, c}})
	if _, body := get(t, url, nil); body != "b" {
		t.Errorf("GET with fallback [dead, b, c] = %q, want %q", body, "b")
	}
	if port, src := p.Upstream(t.Context()); port != b || src != SourceFallback {
		t.Errorf("Upstream() = %d, %q; want %d, %q", port, src, b, SourceFallback)
	}
	p.SetPort(c)
	if _, body := get(t, url, nil); body != "c" {
		t.Errorf("GET after SetPort(c) = %q, want %q", body, "c")
	}
	p.SetPort(0)
	if _, body := get(t, url, nil); body != "b" {
		t.Errorf("GET after SetPort(0) = %q, want the fallback %q", body, "b")
	}
}

func TestErrorPages(t *testing.T) {
	dead := testutil.FreePort(t)
	tests := []struct {
		name     string
		exposed  int
		fallback []int
		want     string
	}{
		{"nothing exposed, nothing listening", 0, []int{dead}, "No app is running"},
		{"exposed port not listening", dead, nil, "Nothing is answering on port " + strconv.Itoa(dead)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := tt.fallback
			if fb == nil {
				fb = []int{}
			}
			p, url := newProxy(t, Options{FallbackPorts: fb})
			p.SetPort(tt.exposed)
			resp, body := get(t, url, nil)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, tt.want) {
				t.Errorf("GET = %d %q, want 502 containing %q", resp.StatusCode, body, tt.want)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Errorf("Content-Type = %q, want text/html", ct)
			}
			if !strings.Contains(body, "proliferate services expose --port") {
				t.Errorf("error page does not say how to expose a port: %q", body)
			}
		})
	}
}

// TestWebSocketSurvivesUpstreamChange: a connection keeps its upstream when
// the exposed port changes; new connections go to the new port.
func TestWebSocketSurvivesUpstreamChange(t *testing.T) {
	a, b := testutil.EchoApp(t, "a"), testutil.EchoApp(t, "b")
	p, url := newProxy(t, Options{FallbackPorts: []int{}})
	p.SetPort(a)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(url, "http")
	conn, resp, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("dial WebSocket through the proxy: %v", err)
	}
	defer conn.CloseNow()
	if v := resp.Header.Get("X-Frame-Options"); v != "" {
		t.Errorf("101 response X-Frame-Options = %q", v)
	}
	echo := func(c *websocket.Conn, msg string) string {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			t.Fatalf("write %q: %v", msg, err)
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("read answer to %q: %v", msg, err)
		}
		return string(got)
	}
	if got := echo(conn, "1"); got != "a:1" {
		t.Fatalf("echo = %q, want a:1", got)
	}
	p.SetPort(b)
	if got := echo(conn, "2"); got != "a:2" {
		t.Errorf("after SetPort(b), open connection echo = %q, want a:2", got)
	}
	conn2, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("dial second WebSocket: %v", err)
	}
	defer conn2.CloseNow()
	if got := echo(conn2, "3"); got != "b:3" {
		t.Errorf("new connection echo = %q, want b:3", got)
	}
	p.SetPort(a)
	if got := echo(conn, "4"); got != "a:4" {
		t.Errorf("after SetPort(a), first connection echo = %q, want a:4", got)
	}
	conn.Close(websocket.StatusNormalClosure, "")
	conn2.Close(websocket.StatusNormalClosure, "")
}

func TestNewRejectsBadFallbackPort(t *testing.T) {
	if _, err := New(Options{Logger: quietLogger(), FallbackPorts: []int{0}}); err == nil {
		t.Error("New with fallback port 0 = nil error, want an error")
	}
	if _, err := New(Options{}); err == nil {
		t.Error("New without Logger = nil error, want an error")
	}
}

// Benchmarks: the same small GET and the same 1 MiB download, straight to
// the app and through the proxy.
func benchServer(b *testing.B) (direct string, proxied string) {
	payload := bytes.Repeat([]byte("x"), 1<<20)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(payload)))
			w.Write(payload)
			return
		}
		io.WriteString(w, "ok")
	}))
	b.Cleanup(srv.Close)
	p, url := newProxy(b, Options{FallbackPorts: []int{}})
	p.SetPort(srv.Listener.Addr().(*net.TCPAddr).Port)
	return srv.URL, url
}

func benchGet(b *testing.B, client *http.Client, url string, size int64) {
	if size > 0 {
		b.SetBytes(size)
	}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || (size > 0 && n != size) {
			b.Fatalf("GET %s = %d, %d bytes", url, resp.StatusCode, n)
		}
	}
}

func BenchmarkRequest(b *testing.B) {
	direct, proxied := benchServer(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	b.Run("direct", func(b *testing.B) { benchGet(b, client, direct+"/", 0) })
	b.Run("proxy", func(b *testing.B) { benchGet(b, client, proxied+"/", 0) })
}

func BenchmarkThroughput(b *testing.B) {
	direct, proxied := benchServer(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	b.Cleanup(client.CloseIdleConnections)
	b.Run("direct", func(b *testing.B) { benchGet(b, client, direct+"/big", 1<<20) })
	b.Run("proxy", func(b *testing.B) { benchGet(b, client, proxied+"/big", 1<<20) })
}

// TestDefaultHostReachesIPv6OnlyApp: dev servers that bind "localhost" may
// listen on ::1 only; the default upstream host reaches them too.
func TestDefaultHostReachesIPv6OnlyApp(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "v6 "+r.Host)
	})}}
	srv.Start()
	t.Cleanup(srv.Close)
	port := ln.Addr().(*net.TCPAddr).Port
	p, err := New(Options{Logger: quietLogger(), FallbackPorts: []int{}})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })
	p.SetPort(port)
	want := "v6 localhost:" + strconv.Itoa(port)
	if _, body := get(t, front.URL, nil); body != want {
		t.Errorf("GET through the proxy = %q, want %q", body, want)
	}
}

// TestConcurrentSetPort: requests in flight while the port flips between two
// apps always reach one of them.
func TestConcurrentSetPort(t *testing.T) {
	a, b := testutil.EchoApp(t, "a"), testutil.EchoApp(t, "b")
	p, url := newProxy(t, Options{FallbackPorts: []int{}})
	p.SetPort(a)
	done := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if i%2 == 0 {
				p.SetPort(b)
			} else {
				p.SetPort(a)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for i := 0; i < 200; i++ {
		resp, body := get(t, url, nil)
		if resp.StatusCode != 200 || (body != "a" && body != "b") {
			t.Errorf("request %d = %d %q, want 200 from a or b", i, resp.StatusCode, body)
			break
		}
	}
	close(done)
	<-flipped
}
