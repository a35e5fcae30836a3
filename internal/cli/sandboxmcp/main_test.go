package sandboxmcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
)

func TestUnknownModeIsUsageExit1(t *testing.T) {
	for _, args := range [][]string{nil, {"bogus"}} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if code != 1 {
			t.Errorf("run(%q) = %d, want 1", args, code)
		}
		if !strings.Contains(stderr.String(), "usage: sandbox-mcp") {
			t.Errorf("run(%q) stderr = %q, want usage", args, stderr.String())
		}
		if stdout.Len() != 0 {
			t.Errorf("run(%q) wrote %q to stdout, want nothing", args, stdout.String())
		}
	}
}

// authed sends a request with the sidecar's token.
func authed(t *testing.T, s *sidecartest.Sidecar, method, path, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+sidecartest.Token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// sigtermExitsZero sends SIGTERM and requires exit 0 within timeout.
func sigtermExitsZero(t *testing.T, s *sidecartest.Sidecar, timeout time.Duration) {
	t.Helper()
	if err := s.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited, err := s.Exited(timeout)
	if !exited {
		t.Fatalf("sidecar still running %s after SIGTERM", timeout)
	}
	if err != nil {
		t.Fatalf("sidecar exited with %v after SIGTERM, want 0; stderr:\n%s", err, s.Stderr())
	}
}

func TestAPIModeServesAndShutsDownOnSIGTERM(t *testing.T) {
	s := sidecartest.Start(t, sidecartest.Build(t))
	resp := authed(t, s, "GET", "/api/auth/check", "")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("auth check with the configured token = %d, want 200", resp.StatusCode)
	}
	sigtermExitsZero(t, s, 15*time.Second)
}

func TestGeneratedTokenIsPrintedWhenNoneConfigured(t *testing.T) {
	s := sidecartest.Start(t, sidecartest.Build(t), "SANDBOX_MCP_AUTH_TOKEN=", "SERVICE_TO_SERVICE_AUTH_TOKEN=")
	// The sidecar prints the line before it serves, but stderr reaches the
	// test through a pipe copied by another goroutine: the health answer can
	// arrive before the copy does, so wait for the line (bounded).
	var token string
	for deadline := time.Now().Add(10 * time.Second); token == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, line := range strings.Split(s.Stderr(), "\n") {
			// export SANDBOX_MCP_AUTH_TOKEN=<48 hex> PROLIFERATE_SANDBOX_MCP_URL=…
			if rest, ok := strings.CutPrefix(line, "export SANDBOX_MCP_AUTH_TOKEN="); ok {
				if tok, _, _ := strings.Cut(rest, " "); len(tok) == 48 {
					token = tok
				}
			}
		}
	}
	if token == "" {
		t.Fatalf("no generated token printed on stderr:\n%s", s.Stderr())
	}
	for tok, want := range map[string]int{token: 200, "": 401, "wrong": 401, sidecartest.Token: 401} {
		req, _ := http.NewRequest("GET", s.URL+"/api/auth/check", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("auth check with token %q = %d, want %d", tok, resp.StatusCode, want)
		}
	}
}

// BenchmarkColdStart measures exec → first 200 from /api/health, and reports
// the binary's size and the idle RSS of the started sidecar.
func BenchmarkColdStart(b *testing.B) {
	bin := sidecartest.Build(b)
	fi, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}
	var rssKB int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := sidecartest.Start(b, bin) // returns at the first 200 from /api/health
		b.StopTimer()
		rssKB = readRSSKB(s.PID())
		s.Stop(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(fi.Size())/(1<<20), "binary-MiB")
	b.ReportMetric(float64(rssKB)/1024, "idle-RSS-MiB")
}

func readRSSKB(pid int) int {
	// Let start-up work settle so this is the idle figure.
	time.Sleep(200 * time.Millisecond)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	return 0
}

// TestSIGTERMEndsStreamsAndLeavesServicesRunning: a shutdown with an open log
// stream still exits 0 promptly, and the dev server it supervised keeps running.
func TestSIGTERMEndsStreamsAndLeavesServicesRunning(t *testing.T) {
	s := sidecartest.Start(t, sidecartest.Build(t))
	resp := authed(t, s, "POST", "/api/services", `{"name":"keeper","command":"echo up; exec sleep 600"}`)
	var started struct {
		Service struct{ PID int } `json:"service"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&started); err != nil || started.Service.PID == 0 {
		t.Fatalf("start keeper: %v %+v", err, started)
	}
	resp.Body.Close()
	pid := started.Service.PID
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

	stream := authed(t, s, "GET", "/api/logs/keeper", "")
	defer stream.Body.Close()
	if stream.StatusCode != 200 {
		t.Fatalf("GET /api/logs/keeper = %d", stream.StatusCode)
	}

	sigtermExitsZero(t, s, 8*time.Second)
	if _, err := io.ReadAll(stream.Body); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("stream ended with %v", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("service process %d is gone after the sidecar's SIGTERM: %v; services must outlive the sidecar", pid, err)
	}
}
