// Package testutil holds the helpers several packages' tests share: a free
// loopback port, an echo app to proxy to, child processes in their own process
// group that are killed with the group at cleanup, the module's commands built once
// per checkout (BuildCommands), and what a test that needs the network calls first
// (RequireReachable, RequireNPMRegistry, NPMPackages), so that without the network
// it fails within a minute naming the host. Only _test.go files (and test-only
// packages such as caddytest) import it.
package testutil

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/coder/websocket"
)

// FreePort returns a loopback TCP port that was free a moment ago; nothing
// listens on it when FreePort returns.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// EchoApp is a dev-server stand-in on a free loopback port until the test
// ends; it returns the port. A GET answers name, with the headers a preview
// proxy must strip (X-Frame-Options, Content-Security-Policy) and what the app
// saw: X-App (name), X-Seen-Host, X-Seen-Forwarded-For and X-Path. A WebSocket
// echoes each message prefixed with name and ":".
func EchoApp(t testing.TB, name string) int {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "websocket" {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, msg, err := c.Read(r.Context())
				if err != nil {
					return
				}
				if err := c.Write(r.Context(), typ, append([]byte(name+":"), msg...)); err != nil {
					return
				}
			}
		}
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
		w.Header().Set("X-App", name)
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-Forwarded-For", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Path", r.URL.Path)
		io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// StartGroup starts cmd in a process group of its own and kills the group at
// cleanup (KillGroup). Set cmd's pipes before calling it.
func StartGroup(t testing.TB, cmd *exec.Cmd) error {
	t.Helper()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return err
	}
	t.Cleanup(func() { KillGroup(cmd) })
	return nil
}

// KillGroup sends SIGKILL to cmd's process group and reaps cmd. Once cmd is
// reaped it does nothing, so it never signals a group whose id was reused.
func KillGroup(cmd *exec.Cmd) {
	if cmd.Process == nil || cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
}

// HTTPServer starts python's HTTP server on a free loopback port in a process
// group of its own, with env added to its environment, and returns it and its
// port; it is killed with its group at cleanup.
func HTTPServer(t testing.TB, env ...string) (*exec.Cmd, int) {
	t.Helper()
	cmd := exec.Command("bash", "-c", "exec python3 -u -m http.server 0 --bind 127.0.0.1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := StartGroup(t, cmd); err != nil {
		t.Fatalf("start python3: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read python3 banner: %v", err)
	}
	// "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
	var host string
	var port int
	if _, err := fmt.Sscanf(line, "Serving HTTP on %s port %d", &host, &port); err != nil {
		t.Fatalf("parse python3 banner %q: %v", line, err)
	}
	return cmd, port
}
