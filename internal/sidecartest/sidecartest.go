// Package sidecartest builds and runs a real `sandbox-mcp api` process for
// end-to-end tests of its callers (the CLI, the MCP mode, host code). Test-only.
package sidecartest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Token is the bearer token every Sidecar started here uses.
const Token = "sidecartest-token"

// Build compiles cmd/sandbox-mcp into a temp dir of t and returns its path.
func Build(t testing.TB) string {
	t.Helper()
	return filepath.Join(testutil.Commands(t, "sandbox-mcp"), "sandbox-mcp")
}

// Sidecar is a running `sandbox-mcp api`.
type Sidecar struct {
	URL       string
	StateDir  string
	Workspace string
	// Env is what a client process needs to reach it (token, URL, dirs).
	Env []string

	cmd      *exec.Cmd
	stderr   *testutil.Buffer
	done     chan struct{}
	waitErr  error // set before done is closed
	stopOnce sync.Once
}

// Start runs bin in api mode on a free loopback port with its own state dir and
// workspace, waits until /api/health answers, and stops it (and every service
// it started) when t ends.
func Start(t testing.TB, bin string, env ...string) *Sidecar {
	t.Helper()
	dir := t.TempDir()
	s := &Sidecar{StateDir: filepath.Join(dir, "state"), Workspace: filepath.Join(dir, "workspace")}
	if err := os.MkdirAll(s.Workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(testutil.FreePort(t))
	s.URL = "http://" + addr
	s.Env = []string{
		rules.EnvAuthToken + "=" + Token,
		rules.EnvAddr + "=" + addr,
		rules.EnvSidecarURL + "=" + s.URL,
		rules.EnvStateDir + "=" + s.StateDir,
		rules.EnvWorkspaceDir + "=" + s.Workspace,
		rules.EnvPreviewAddr + "=127.0.0.1:0",
		rules.EnvCaddySnippet + "=" + filepath.Join(dir, "user.caddy"),
		rules.EnvCaddyfile + "=" + filepath.Join(dir, "Caddyfile"),
		rules.EnvCaddyAdmin + "=127.0.0.1:1",
	}
	s.Env = append(s.Env, env...)
	s.cmd = exec.Command(bin, "api")
	s.cmd.Env = append(os.Environ(), s.Env...)
	s.stderr = &testutil.Buffer{}
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start sandbox-mcp api: %v", err)
	}
	s.done = make(chan struct{})
	go func() { s.waitErr = s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.Stop(t) })
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/api/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return s
			}
		}
		select {
		case <-s.done:
			t.Fatalf("sandbox-mcp api exited before it was healthy; stderr:\n%s", s.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox-mcp api not healthy within 15 s; stderr:\n%s", s.stderr.String())
		}
		// A short poll keeps this usable for cold-start measurements.
		time.Sleep(2 * time.Millisecond)
	}
}

// Signal sends sig to the sidecar process (not its group).
func (s *Sidecar) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Exited waits up to timeout for the sidecar to exit; exited is false when
// it is still running, err its exit error (nil for exit 0).
func (s *Sidecar) Exited(timeout time.Duration) (exited bool, err error) {
	select {
	case <-s.done:
		return true, s.waitErr
	case <-time.After(timeout):
		return false, nil
	}
}

// PID is the sidecar's process id.
func (s *Sidecar) PID() int { return s.cmd.Process.Pid }

// Stderr is what the sidecar logged so far.
func (s *Sidecar) Stderr() string { return s.stderr.String() }

// Do sends an authenticated request and decodes a JSON answer into out (when not nil).
func (s *Sidecar) Do(method, path string, body any, out any) (int, error) {
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// Stop stops every service through the API (services outlive the sidecar by
// design), then the sidecar's process group. It runs once; t's cleanup calls it.
func (s *Sidecar) Stop(t testing.TB) {
	s.stopOnce.Do(func() { s.stop(t) })
}

func (s *Sidecar) stop(t testing.TB) {
	var list struct {
		Services []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"services"`
	}
	if _, err := s.Do("GET", "/api/services", nil, &list); err == nil {
		for _, svc := range list.Services {
			if _, err := s.Do("DELETE", "/api/services/"+svc.Name, nil, nil); err != nil {
				t.Logf("stop service %s: %v", svc.Name, err)
			}
		}
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}
