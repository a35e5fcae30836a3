package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/logtail"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
)

// TestLogStreamFollowsRealRotation: a real service writes through the real
// monitor, which rotates its log at 4 KiB many times while an SSE client
// streams; the initial frame plus every append is exactly what was written.
func TestLogStreamFollowsRealRotation(t *testing.T) {
	state, ws := t.TempDir(), t.TempDir()
	m, err := services.New(services.Config{StateDir: state, WorkspaceDir: ws, StopTimeout: 2 * time.Second, LogMaxBytes: 4096, LogKeep: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	logs, err := logtail.New(logtail.Options{Dir: state + "/logs"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Token: testToken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Services: m, Logs: logs})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); ts.Close() })

	const lines = 3000
	// Waits for the go-ahead file so the stream is open before any output.
	cmd := fmt.Sprintf(`while [ ! -e go ]; do sleep 0.01; done; for i in $(seq 1 %d); do echo "line $i ü"; if [ $((i %% 50)) -eq 0 ]; then sleep 0.02; fi; done; echo END`, lines)
	if _, err := m.Start(context.Background(), apitype.StartServiceRequest{Name: "chatty", Command: cmd}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background(), "chatty") })

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/logs/chatty", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/logs/chatty = %d", resp.StatusCode)
	}
	if err := os.WriteFile(ws+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}

	var got strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var f apitype.LogFrame
		if err := json.Unmarshal([]byte(data), &f); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		if f.Type == "error" {
			t.Fatalf("error frame: %s", f.Message)
		}
		got.WriteString(f.Content)
		if strings.HasSuffix(got.String(), "END\n") {
			break
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("stream ended before END after %d bytes: %v", got.Len(), err)
	}

	out := got.String()
	marker, body, ok := strings.Cut(out, "Working directory: "+ws+"\n\n")
	if !ok || !strings.Contains(marker, `=== Service "chatty" started at `) {
		t.Fatalf("stream does not start with the log marker: %q", out[:min(len(out), 300)])
	}
	var want strings.Builder
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "line %d ü\n", i)
	}
	want.WriteString("END\n")
	if body != want.String() {
		// Find the first difference for a readable failure.
		i := 0
		for i < len(body) && i < want.Len() && body[i] == want.String()[i] {
			i++
		}
		t.Fatalf("streamed %d bytes, want %d; first difference at byte %d: got %q, want %q",
			len(body), want.Len(), i, body[i:min(len(body), i+40)], want.String()[i:min(want.Len(), i+40)])
	}
	if _, err := os.Stat(state + "/logs/chatty.log.2"); err != nil {
		t.Errorf("the log never rotated twice (no chatty.log.2): %v", err)
	}
}
