package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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

// buildBinary builds sandbox-mcp once per test binary run.
func buildBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sandbox-mcp")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// sidecar is a running `sandbox-mcp api` process.
type sidecarProc struct {
	cmd    *exec.Cmd
	url    string
	stderr *bytes.Buffer
}

func startSidecar(t testing.TB, bin string, env ...string) *sidecarProc {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "api", "--addr", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Env = append(os.Environ(),
		"SANDBOX_MCP_AUTH_TOKEN=tok",
		"SANDBOX_MCP_STATE_DIR="+filepath.Join(dir, "state"),
		"WORKSPACE_DIR="+dir,
		"SANDBOX_MCP_PREVIEW_ADDR=127.0.0.1:0",
		"SANDBOX_MCP_CADDY_SNIPPET="+filepath.Join(dir, "user.caddy"),
		"SANDBOX_MCP_CADDYFILE="+filepath.Join(dir, "Caddyfile"),
		"SANDBOX_MCP_CADDY_ADMIN=127.0.0.1:1",
	)
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &sidecarProc{cmd: cmd, url: fmt.Sprintf("http://127.0.0.1:%d", port), stderr: &stderr}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return s
}

// waitHealthy polls /api/health until it answers 200.
func waitHealthy(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		resp, err := c.Get(url + "/api/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s/api/health did not answer 200 within %s", url, timeout)
}

func TestAPIModeServesAndShutsDownOnSIGTERM(t *testing.T) {
	bin := buildBinary(t)
	s := startSidecar(t, bin)
	waitHealthy(t, s.url, 10*time.Second)

	req, _ := http.NewRequest("GET", s.url+"/api/auth/check", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("auth check with the configured token = %d, want 200", resp.StatusCode)
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sidecar exited with %v after SIGTERM, want 0; stderr:\n%s", err, s.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("sidecar still running 15 s after SIGTERM")
	}
}

func TestGeneratedTokenIsPrintedWhenNoneConfigured(t *testing.T) {
	bin := buildBinary(t)
	port := freePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "api", "--addr", fmt.Sprintf("127.0.0.1:%d", port))
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SANDBOX_MCP_AUTH_TOKEN=") && !strings.HasPrefix(kv, "SERVICE_TO_SERVICE_AUTH_TOKEN=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "SANDBOX_MCP_STATE_DIR="+dir, "WORKSPACE_DIR="+dir, "SANDBOX_MCP_PREVIEW_ADDR=127.0.0.1:0",
		"SANDBOX_MCP_CADDY_SNIPPET="+filepath.Join(dir, "user.caddy"), "SANDBOX_MCP_CADDY_ADMIN=127.0.0.1:1")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	var token string
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(sc.Text(), "  ") && len(line) == 48 {
			token = line
			break
		}
	}
	go io.Copy(io.Discard, stderr)
	if token == "" {
		t.Fatal("no generated token printed on stderr")
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	waitHealthy(t, url, 10*time.Second)
	for tok, want := range map[string]int{token: 200, "": 401, "wrong": 401} {
		req, _ := http.NewRequest("GET", url+"/api/auth/check", nil)
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
	bin := buildBinary(b)
	fi, err := os.Stat(bin)
	if err != nil {
		b.Fatal(err)
	}
	var rssKB int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := startSidecar(b, bin)
		waitHealthy(b, s.url, 10*time.Second)
		b.StopTimer()
		rssKB = readRSSKB(s.cmd.Process.Pid)
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		_ = s.cmd.Wait()
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
	bin := buildBinary(t)
	s := startSidecar(t, bin)
	waitHealthy(t, s.url, 10*time.Second)
	authed := func(method, path, body string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer tok")
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return resp
	}
	resp := authed("POST", "/api/services", `{"name":"keeper","command":"echo up; exec sleep 600"}`)
	var started struct {
		Service struct{ PID int } `json:"service"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&started); err != nil || started.Service.PID == 0 {
		t.Fatalf("start keeper: %v %+v", err, started)
	}
	resp.Body.Close()
	pid := started.Service.PID
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) })

	stream := authed("GET", "/api/logs/keeper", "")
	defer stream.Body.Close()
	if stream.StatusCode != 200 {
		t.Fatalf("GET /api/logs/keeper = %d", stream.StatusCode)
	}

	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sidecar exited with %v after SIGTERM with an open stream, want 0; stderr:\n%s", err, s.stderr)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("sidecar still running 8 s after SIGTERM with an open log stream")
	}
	if _, err := io.ReadAll(stream.Body); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("stream ended with %v", err)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Errorf("service process %d is gone after the sidecar's SIGTERM: %v; services must outlive the sidecar", pid, err)
	}
}
