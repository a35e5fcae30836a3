// Package caddytest runs a real Caddy for tests: the binary from PATH, on a
// Caddyfile the test renders, killed with its process group at cleanup. Sites
// must be http:// addresses so Caddy never sets up TLS (and never installs its
// root certificate into the machine's trust store).
package caddytest

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// Binary returns the caddy binary on PATH, skipping t when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("caddy")
	if err != nil {
		t.Skip("caddy is not on PATH")
	}
	return bin
}

// Caddy is a running caddy process.
type Caddy struct {
	// Caddyfile is the path it was started with.
	Caddyfile string
	cmd       *exec.Cmd
	log       *testutil.Buffer
}

// Start runs `caddy run` on caddyfile (written to dir/Caddyfile), waits until
// adminSocket answers and site (host:port) accepts connections, and stops it
// at cleanup.
func Start(t testing.TB, dir string, caddyfile []byte, adminSocket, site string) *Caddy {
	t.Helper()
	return start(t, dir, caddyfile, site, func() bool { return AdminReady(adminSocket) })
}

func start(t testing.TB, dir string, caddyfile []byte, site string, adminReady func() bool) *Caddy {
	t.Helper()
	bin := Binary(t)
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, caddyfile, 0o644); err != nil {
		t.Fatal(err)
	}
	c := &Caddy{Caddyfile: path, log: &testutil.Buffer{}}
	c.cmd = exec.Command(bin, "run", "--config", path, "--adapter", "caddyfile")
	c.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	c.cmd.Stdout, c.cmd.Stderr = c.log, c.log
	if err := testutil.StartGroup(t, c.cmd); err != nil {
		t.Fatalf("start caddy: %v", err)
	}
	t.Cleanup(func() {
		testutil.KillGroup(c.cmd) // before StartGroup's cleanup: the log is complete
		if t.Failed() {
			t.Logf("caddy output:\n%s", c.log.String())
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if adminReady() && accepts(site) {
			if strings.Contains(c.log.String(), "installing root certificate") {
				t.Errorf("caddy set up TLS and installs its root certificate: test sites must be http:// addresses")
			}
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("caddy did not start within 15s:\n%s", c.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log returns what caddy printed so far.
func (c *Caddy) Log() string { return c.log.String() }

// AdminReady reports whether the admin unix socket answers GET /config/.
func AdminReady(socket string) bool {
	conn, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http:///config/", nil)
	if req.Write(conn) != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func accepts(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// Addr returns "127.0.0.1:port".
func Addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// SocketPath returns a short path for a unix socket (the kernel limits them
// to about 100 bytes, which t.TempDir paths can exceed), removed at cleanup.
func SocketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "admin.sock")
}

// StartTCP is Start for a Caddyfile whose admin endpoint is host:port.
func StartTCP(t testing.TB, dir string, caddyfile []byte, admin, site string) *Caddy {
	t.Helper()
	return start(t, dir, caddyfile, site, func() bool {
		resp, err := http.Get("http://" + admin + "/config/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
