package api

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/logtail"
)

// checkLogLeaks fails t if goroutines started during the test outlive its cleanups.
func checkLogLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// logServer serves a real logtail.Dir over loopback HTTP.
func logServer(t testing.TB, opts logtail.Options) (*Server, *httptest.Server, string) {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	logs, err := logtail.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Logs: logs})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); ts.Close() })
	return s, ts, opts.Dir
}

func writeLog(t testing.TB, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// logEvent is one event of a log stream: a data frame or a comment.
type logEvent struct {
	apitype.LogFrame
	comment string
}

// logStreamClient reads a log stream on its own goroutine, which ends when the
// stream does.
type logStreamClient struct {
	resp   *http.Response
	frames chan logEvent
	client *http.Client
}

func openLogStream(t testing.TB, url string) *logStreamClient {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET %s = %d %s, want 200", url, resp.StatusCode, b)
	}
	c := &logStreamClient{resp: resp, frames: make(chan logEvent, 1024), client: client}
	go func() {
		defer close(c.frames)
		br := bufio.NewReader(resp.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case strings.HasPrefix(line, "data: "):
				var f logEvent
				if err := json.Unmarshal([]byte(line[len("data: "):]), &f.LogFrame); err != nil {
					f.Type = "bad frame: " + line
				}
				c.frames <- f
			case strings.HasPrefix(line, ":"):
				c.frames <- logEvent{comment: line}
			}
		}
	}()
	t.Cleanup(c.close)
	return c
}

func (c *logStreamClient) close() {
	c.resp.Body.Close()
	for range c.frames {
	}
	c.client.CloseIdleConnections()
}

// next returns the next data frame, skipping comments.
func (c *logStreamClient) next(t testing.TB) apitype.LogFrame {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				t.Fatal("stream ended, want another frame")
			}
			if f.comment == "" {
				return f.LogFrame
			}
		case <-timeout:
			t.Fatal("no frame within 10s")
		}
	}
}

// appended reads append frames until they hold n bytes.
func (c *logStreamClient) appended(t testing.TB, n int) string {
	t.Helper()
	var sb strings.Builder
	for sb.Len() < n {
		f := c.next(t)
		if f.Type != "append" || f.Content == "" {
			t.Fatalf("frame = %+v, want a non-empty append", f)
		}
		if !utf8.ValidString(f.Content) {
			t.Fatalf("append frame %q is not valid UTF-8", f.Content)
		}
		sb.WriteString(f.Content)
	}
	return sb.String()
}

func TestLogsStream(t *testing.T) {
	checkLogLeaks(t)
	_, ts, dir := logServer(t, logtail.Options{})
	path := filepath.Join(dir, "web.log")
	long := strings.Repeat("ü", 5001) + "tail\n" // 10007 bytes
	writeLog(t, path, long)

	beforeStream := goleak.IgnoreCurrent()
	c := openLogStream(t, ts.URL+"/api/logs/web")
	for k, want := range map[string]string{
		"Content-Type":      "text/event-stream",
		"Cache-Control":     "no-cache",
		"Connection":        "keep-alive",
		"X-Accel-Buffering": "no",
	} {
		if got := c.resp.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	f := c.next(t)
	if want := long[len(long)-9999:]; f.Type != "initial" || f.Content != want {
		t.Fatalf("first frame = %s %d bytes %.20q, want initial with the last 9999 bytes (10000 starts mid-character)", f.Type, len(f.Content), f.Content)
	}

	writeLog(t, path, "appended ✓\n")
	if got := c.appended(t, len("appended ✓\n")); got != "appended ✓\n" {
		t.Fatalf("append = %q, want %q", got, "appended ✓\n")
	}

	// A character written in two halves arrives whole.
	snow := "☃"
	writeLog(t, path, "x"+snow[:1])
	if got := c.appended(t, 1); got != "x" {
		t.Fatalf("append = %q, want %q", got, "x")
	}
	select {
	case f := <-c.frames:
		t.Fatalf("frame %+v while half a character is written, want none", f)
	case <-time.After(100 * time.Millisecond):
	}
	writeLog(t, path, snow[1:]+"\n")
	if got := c.appended(t, len(snow)+1); got != snow+"\n" {
		t.Fatalf("append = %q, want %q", got, snow+"\n")
	}

	// Truncation: what is written afterwards is delivered from its start.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	writeLog(t, path, "after truncation\n")
	if got := c.appended(t, len("after truncation\n")); got != "after truncation\n" {
		t.Fatalf("append after truncation = %q, want %q", got, "after truncation\n")
	}

	// The client goes away: the handler, its follower and the watcher end
	// with it, not only when the server closes.
	c.close()
	if err := goleak.Find(beforeStream); err != nil {
		t.Fatalf("after the client disconnected: %v", err)
	}
}

func TestLogsEmptyLogHasNoInitialFrame(t *testing.T) {
	checkLogLeaks(t)
	_, ts, dir := logServer(t, logtail.Options{})
	path := filepath.Join(dir, "web.log")
	writeLog(t, path, "")
	c := openLogStream(t, ts.URL+"/api/logs/web")
	writeLog(t, path, "hi\n")
	if f := c.next(t); f.Type != "append" || f.Content != "hi\n" {
		t.Fatalf("first frame = %+v, want append %q", f, "hi\n")
	}
	c.close()
}

func TestLogsRotationByteExact(t *testing.T) {
	checkLogLeaks(t)
	_, ts, dir := logServer(t, logtail.Options{})
	w := &rotatingLog{dir: dir, name: "web", limit: 1500}
	defer w.close()
	w.write(t, "start\n")
	c := openLogStream(t, ts.URL+"/api/logs/web")
	if f := c.next(t); f.Type != "initial" || f.Content != "start\n" {
		t.Fatalf("first frame = %+v, want initial %q", f, "start\n")
	}

	var received atomic.Int64
	written := 0
	w.beforeRotate = func() {
		// Keep the reader within a file of the writer, as a 10 MiB limit does.
		deadline := time.Now().Add(10 * time.Second)
		for received.Load() < int64(written-w.limit) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	var want strings.Builder
	for i := range 300 {
		want.WriteString(strings.Repeat("é", i%5) + " line ✓ " + strings.Repeat("-", i%50) + "\n")
	}
	done := make(chan string)
	go func() {
		var got strings.Builder
		for got.Len() < want.Len() {
			f, ok := <-c.frames
			if !ok {
				break
			}
			if f.comment != "" {
				continue
			}
			if f.Type != "append" {
				t.Errorf("frame %+v, want append", f)
			}
			got.WriteString(f.Content)
			received.Store(int64(got.Len()))
		}
		done <- got.String()
	}()
	for _, line := range strings.SplitAfter(want.String(), "\n") {
		written += len(line)
		w.write(t, line)
	}
	var got string
	select {
	case got = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("received %d of %d bytes", received.Load(), want.Len())
	}
	if w.rotations < 5 {
		t.Errorf("rotations = %d, want several", w.rotations)
	}
	if diff := cmp.Diff(want.String(), got); diff != "" {
		t.Fatalf("appends across %d rotations differ from what was written (-want +got):\n%s", w.rotations, diff)
	}
	c.close()
}

// rotatingLog writes like the service manager: at limit bytes (or just past
// it, at the end of a character), .log.1 becomes .log.2, .log becomes .log.1,
// and a new .log is created.
type rotatingLog struct {
	dir, name    string
	limit, size  int
	f            *os.File
	rotations    int
	beforeRotate func()
}

func (w *rotatingLog) path(gen string) string { return filepath.Join(w.dir, w.name+".log"+gen) }

func (w *rotatingLog) write(t testing.TB, s string) {
	t.Helper()
	if w.f == nil {
		f, err := os.OpenFile(w.path(""), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		w.f = f
	}
	for len(s) > 0 {
		if w.size >= w.limit {
			if w.beforeRotate != nil {
				w.beforeRotate()
			}
			w.f.Close()
			if err := os.Rename(w.path(".1"), w.path(".2")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			if err := os.Rename(w.path(""), w.path(".1")); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(w.path(""), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			w.f, w.size = f, 0
			w.rotations++
		}
		n := min(len(s), w.limit-w.size)
		for n < len(s) && n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		if n == 0 {
			for n = 1; n < len(s) && !utf8.RuneStart(s[n]); n++ {
			}
		}
		if _, err := w.f.WriteString(s[:n]); err != nil {
			t.Fatal(err)
		}
		w.size += n
		s = s[n:]
	}
}

func (w *rotatingLog) close() {
	if w.f != nil {
		w.f.Close()
	}
}

func TestLogsEndOnServerClose(t *testing.T) {
	checkLogLeaks(t)
	s, ts, dir := logServer(t, logtail.Options{})
	writeLog(t, filepath.Join(dir, "web.log"), "x\n")
	c := openLogStream(t, ts.URL+"/api/logs/web")
	c.next(t)
	s.Close()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.close()
				return
			}
			if f.comment == "" {
				t.Fatalf("frame %+v after Close, want the stream to end", f)
			}
		case <-timeout:
			t.Fatal("stream still open 10s after Server.Close")
		}
	}
}

func TestLogsKeepAlive(t *testing.T) {
	checkLogLeaks(t)
	old := logKeepAlive
	logKeepAlive = 20 * time.Millisecond
	t.Cleanup(func() { logKeepAlive = old }) // after the server's cleanup
	_, ts, dir := logServer(t, logtail.Options{})
	writeLog(t, filepath.Join(dir, "web.log"), "")
	c := openLogStream(t, ts.URL+"/api/logs/web")
	select {
	case f := <-c.frames:
		if f.comment != ": keep-alive" {
			t.Fatalf("frame on a silent log = %+v, want the comment %q", f, ": keep-alive")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no keep-alive comment within 10s")
	}
	c.close()
}

func TestLogsErrors(t *testing.T) {
	_, ts, dir := logServer(t, logtail.Options{})
	writeLog(t, filepath.Join(dir, "web.log"), "a\n")
	tests := []struct {
		path       string
		wantStatus int
		wantError  string
	}{
		{"/api/logs/nope", 404, `No logs found for service "nope"`},
		{"/api/logs/nope?tail=5", 404, `No logs found for service "nope"`},
		{"/api/logs/..%2F..%2Fetc%2Fpasswd", 400, ""},
		{"/api/logs/%2E%2E", 400, ""},
		{"/api/logs/a%20b", 400, ""},
		{"/api/logs/" + strings.Repeat("a", 65), 400, ""},
		{"/api/logs/web?tail=0", 400, "tail must be an integer from 1 to 10000"},
		{"/api/logs/web?tail=10001", 400, "tail must be an integer from 1 to 10000"},
		{"/api/logs/web?tail=-1", 400, "tail must be an integer from 1 to 10000"},
		{"/api/logs/web?tail=abc", 400, "tail must be an integer from 1 to 10000"},
		{"/api/logs/web?tail=", 400, "tail must be an integer from 1 to 10000"},
		{"/api/logs/web?tail=1.5", 400, "tail must be an integer from 1 to 10000"},
	}
	for _, tt := range tests {
		resp, body := do(t, "GET", ts.URL+tt.path, "Bearer "+testToken, "")
		var e apitype.ErrorResponse
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
			t.Errorf("GET %s body = %q, want a JSON error", tt.path, body)
		}
		if resp.StatusCode != tt.wantStatus || (tt.wantError != "" && e.Error != tt.wantError) {
			t.Errorf("GET %s = %d %q, want %d %q", tt.path, resp.StatusCode, e.Error, tt.wantStatus, tt.wantError)
		}
	}
	if resp, _ := do(t, "GET", ts.URL+"/api/logs/web", "", ""); resp.StatusCode != 401 {
		t.Errorf("GET /api/logs/web without auth = %d, want 401", resp.StatusCode)
	}
}

func TestLogsTail(t *testing.T) {
	_, ts, dir := logServer(t, logtail.Options{})
	writeLog(t, filepath.Join(dir, "web.log.2"), "one\n")
	writeLog(t, filepath.Join(dir, "web.log.1"), "two\nthr")
	writeLog(t, filepath.Join(dir, "web.log"), "ee\nfour\n")
	writeLog(t, filepath.Join(dir, "empty.log"), "")
	tests := []struct {
		path string
		want []string
	}{
		{"/api/logs/web?tail=1", []string{"four"}},
		{"/api/logs/web?tail=2", []string{"three", "four"}},
		{"/api/logs/web?tail=4", []string{"one", "two", "three", "four"}},
		{"/api/logs/web?tail=10000", []string{"one", "two", "three", "four"}},
		{"/api/logs/empty?tail=3", []string{}},
	}
	for _, tt := range tests {
		resp, body := do(t, "GET", ts.URL+tt.path, "Bearer "+testToken, "")
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s, want 200", tt.path, resp.StatusCode, body)
		}
		var got apitype.LogLinesResponse
		if err := json.Unmarshal([]byte(body), &got); err != nil || got.Lines == nil {
			t.Fatalf("GET %s body = %q, want {\"lines\":[...]}", tt.path, body)
		}
		if diff := cmp.Diff(tt.want, got.Lines); diff != "" {
			t.Errorf("GET %s lines (-want +got):\n%s", tt.path, diff)
		}
	}
}

// BenchmarkLogAppendLatency measures write-to-frame latency over loopback
// HTTP: one line is appended to the log, and the clock stops when the SSE
// client has parsed its frame.
func BenchmarkLogAppendLatency(b *testing.B) {
	_, ts, dir := logServer(b, logtail.Options{})
	path := filepath.Join(dir, "web.log")
	writeLog(b, path, "")
	c := openLogStream(b, ts.URL+"/api/logs/web")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	line := []byte("GET /api/health 200 0.1ms\n")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		if _, err := f.Write(line); err != nil {
			b.Fatal(err)
		}
		c.appended(b, len(line))
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLogLatency(b, lat)
}

func reportLogLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}
