package e2bserver_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// served is `sandboxctl serve --protocol e2b` running as a child process.
type served struct {
	srv *e2btest.Server // URL only: the engine and server live in the child
	cmd *exec.Cmd
}

// startServed builds sandboxctl and runs `sandboxctl serve --protocol e2b` on a free
// loopback port with the test API key; it is stopped (its sandboxes killed first)
// when the test ends.
func startServed(t *testing.T) served {
	t.Helper()
	if e, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir()}); err != nil {
		t.Skipf("the local engine cannot run here: %v", err)
	} else {
		e.Close()
	}
	bins := testutil.Commands(t, "sandboxctl")
	cmd := exec.Command(filepath.Join(bins, "sandboxctl"), "--data-dir", t.TempDir(), "serve", "--protocol", "e2b",
		"--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SANDBOXCTL_SANDBOX_MCP="+sandboxMCP, "E2B_API_KEY="+e2btest.APIKey, "HOME="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = io.Discard
	if err := testutil.StartGroup(t, cmd); err != nil {
		t.Fatal(err)
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(out)
	for len(exports) < 6 && sc.Scan() {
		if kv, ok := strings.CutPrefix(sc.Text(), "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			exports[k] = v
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	url := exports[e2b.EnvAPIURL]
	if url == "" {
		t.Fatalf("sandboxctl serve printed %v, want the E2B environment", exports)
	}
	s := served{srv: &e2btest.Server{URL: url}, cmd: cmd}
	t.Cleanup(func() {
		// Kill what it runs, then stop it as a user would (Ctrl-C).
		c := s.srv.Client(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if list, err := c.List(ctx, e2b.ListOptions{States: []string{e2bwire.StateRunning, e2bwire.StatePaused}}); err == nil {
			for _, sb := range list {
				_ = c.Kill(ctx, sb.SandboxID)
			}
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			testutil.KillGroup(cmd)
		}
	})
	return s
}

// TestServedByCLIWithSDKs: the acceptance sequence with both SDKs against
// `sandboxctl serve --protocol e2b`, a separate process, as a user runs it.
func TestServedByCLIWithSDKs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds sandboxctl and runs both SDKs")
	}
	s := startServed(t)
	for _, name := range sdkDirs {
		t.Run(name, func(t *testing.T) {
			node, dir := installSDK(t, name)
			got := runConformance(t, node, dir, s.srv, 0)
			for _, step := range requiredSteps {
				if st := got.Steps[step]; !st.OK {
					t.Errorf("e2b %s against sandboxctl serve: step %s: %v", got.Version, step, st.Detail)
				}
			}
		})
	}
}

// TestServedGetHostURL: with the domain sandboxctl serve prints, getHost's host is
// a URL curl reaches as it is (curl resolves *.localhost to loopback).
func TestServedGetHostURL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds sandboxctl")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl is not installed")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: the server inside the sandbox is python's")
	}
	s := startServed(t)
	c := s.srv.Client(t)
	sb := create(t, c, e2bwire.NewSandbox{})
	e := c.Envd(sb)
	if _, err := e.Start(t.Context(), e2b.StartOptions{Cmd: "/bin/bash", Args: []string{"-c",
		"cd /tmp && echo as-printed > index.html && exec python3 -m http.server 8080 --bind 127.0.0.1"}}); err != nil {
		t.Fatal(err)
	}
	run(t, e, "for i in $(seq 100); do (echo >/dev/tcp/127.0.0.1/8080) 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
	if !strings.HasPrefix(sb.Domain, "localhost:") {
		t.Fatalf("sandbox domain = %q, want localhost:PORT", sb.Domain)
	}
	url := "http://" + e2b.Host(sb.SandboxID, 8080, sb.Domain) + "/index.html"
	out, err := exec.CommandContext(t.Context(), curl, "-sS", "--max-time", "10", url).CombinedOutput()
	if err != nil || string(out) != "as-printed\n" {
		t.Errorf("curl %s = %q, %v, want the page", url, out, err)
	}
}

// rss reads a process's resident set (VmRSS) and its peak (VmHWM) in bytes.
func rss(pid int) (cur, peak int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if k == "VmRSS" {
			cur = n << 10
		} else {
			peak = n << 10
		}
	}
	return cur, peak, nil
}

// pattern is an endless deterministic reader, so a test can send any amount
// without holding it.
type pattern struct{ n int64 }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte('a' + (p.n+int64(i))%26)
	}
	p.n += int64(len(b))
	return len(b), nil
}

// TestUploadMemoryBounded: 8 concurrent 200 MiB uploads keep the server process
// (sandboxctl serve) under 300 MiB resident, peak included (issue 28: 8 × 250 MiB
// held 4.7 GiB when each upload was read whole).
func TestUploadMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1.6 GB")
	}
	s := startServed(t)
	c := s.srv.Client(t)
	sb := create(t, c, e2bwire.NewSandbox{})
	const size, n = 200 << 20, 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "POST", s.srv.URL+"/files?path=/home/user/big"+strconv.Itoa(i),
				io.LimitReader(&pattern{}, size))
			req.ContentLength = size
			req.Header.Set("Content-Type", "application/octet-stream")
			req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
			req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("upload %d: %s: %s", i, resp.Status, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	cur, peak, err := rss(s.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sandboxctl serve after %d × %d MiB uploads: RSS %d MiB, peak %d MiB", n, size>>20, cur>>20, peak>>20)
	if peak > 300<<20 {
		t.Errorf("peak RSS %d MiB, want under 300 MiB", peak>>20)
	}
	e := c.Envd(sb)
	r, err := e.Run(t.Context(), "stat -c %s /home/user/big0 /home/user/big7", e2b.RunOptions{})
	if err != nil || r.Stdout != fmt.Sprintf("%d\n%d\n", size, size) {
		t.Errorf("sizes in the sandbox = %q, %v, want %d each", r.Stdout, err, size)
	}
}

// BenchmarkUpload: one 64 MiB octet-stream upload through the server into a sandbox
// (streamed into `cat` inside it), without an SDK in the way.
func BenchmarkUpload(b *testing.B) {
	srv, c := start(b)
	sb := create(b, c, e2bwire.NewSandbox{})
	const size = 64 << 20
	b.SetBytes(size)
	for b.Loop() {
		req, _ := http.NewRequestWithContext(b.Context(), "POST", srv.URL+"/files?path=/home/user/bench",
			io.LimitReader(&pattern{}, size))
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("upload: %s", resp.Status)
		}
	}
}
