package services

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// holdPort starts python3 listening on a free loopback port in a process
// that is no service's (a stray server), and returns its pid and port.
func holdPort(t *testing.T) (pid, port int) {
	t.Helper()
	cmd := exec.Command("python3", "-u", "-c", `import socket,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1]); time.sleep(300)`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.StartGroup(t, cmd); err != nil {
		t.Skipf("python3: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read the holder's port: %v", err)
	}
	if _, err := fmt.Sscan(line, &port); err != nil {
		t.Fatalf("parse port %q: %v", line, err)
	}
	return cmd.Process.Pid, port
}

// TestReadinessIgnoresForeignListener: a port held by another process never
// makes a service ready, by tcp or http; the timeout's reason names the port
// and its holder, and the run is stopped.
func TestReadinessIgnoresForeignListener(t *testing.T) {
	m := newTestManager(t, Config{})
	holder, port := holdPort(t)
	for _, rd := range []apitype.Readiness{
		{TCP: &port, TimeoutMs: 1500},
		{HTTP: fmt.Sprintf("http://127.0.0.1:%d/", port), TimeoutMs: 1500},
	} {
		name := "tcp"
		if rd.HTTP != "" {
			name = "http"
		}
		t.Run(name, func(t *testing.T) {
			start(t, m, apitype.StartServiceRequest{Name: name, Command: "sleep 30", Readiness: &rd})
			waitFor(t, "the readiness timeout", 20*time.Second, func() bool { return status(m, name) == apitype.StatusError })
			s := get(t, m, name)
			if s.Ready {
				t.Errorf("%s readiness: service reported ready while another process held port %d", name, port)
			}
			if name == "tcp" {
				want := fmt.Sprintf("not ready after 1500 ms: port %d is held by pid %d (", port, holder)
				if !strings.HasPrefix(s.Reason, want) || !strings.Contains(s.Reason, "python3 -u -c import socket,time s=socket.socket();") ||
					!strings.HasSuffix(s.Reason, "), not by this service") {
					t.Errorf("reason = %q, want it to start %q, show the holder's command line and end %q", s.Reason, want, "), not by this service")
				}
			} else if !strings.HasPrefix(s.Reason, "not ready after 1500 ms: GET http://") {
				// The stray server speaks no HTTP: the GET itself fails first.
				t.Errorf("reason = %q, want the failed GET", s.Reason)
			}
			if left := procsOf(m, name); len(left) > 0 {
				t.Errorf("processes %v left after the readiness timeout", left)
			}
		})
	}
}

// TestReadinessIgnoresForeignHTTP: a foreign server answering 200 on the
// URL does not make a sleeping service ready; the reason names the holder.
func TestReadinessIgnoresForeignHTTP(t *testing.T) {
	m := newTestManager(t, Config{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ts.Close()
	port := ts.Listener.Addr().(*net.TCPAddr).Port
	start(t, m, apitype.StartServiceRequest{Name: "web", Command: "sleep 30", Readiness: &apitype.Readiness{HTTP: ts.URL + "/", TimeoutMs: 1000}})
	waitFor(t, "the readiness timeout", 20*time.Second, func() bool { return status(m, "web") == apitype.StatusError })
	s := get(t, m, "web")
	want := fmt.Sprintf("not ready after 1000 ms: port %d is held by pid %d (", port, os.Getpid())
	if s.Ready || !strings.HasPrefix(s.Reason, want) {
		t.Errorf("service = ready %v, reason %q; want not ready, reason starting %q", s.Ready, s.Reason, want)
	}
}

// TestReadinessOwnListener: the run's own listener counts, also when it is a
// descendant that left the process group and dropped the run's marker, and
// also while another process holds the same port on the other IP family.
func TestReadinessOwnListener(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	m := newTestManager(t, Config{})
	port := testutil.FreePort(t)
	serve := fmt.Sprintf(`python3 -c 'import socket,time; s=socket.socket(); s.bind(("127.0.0.1", %d)); s.listen(); time.sleep(300)'`, port)
	tests := []struct{ name, command string }{
		{"direct", "exec " + serve},
		{"escaped", "setsid env -i " + serve + " & sleep 300"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start(t, m, apitype.StartServiceRequest{Name: tt.name, Command: tt.command, Readiness: &apitype.Readiness{TCP: &port, TimeoutMs: 20000}})
			waitFor(t, "ready", 25*time.Second, func() bool { s, _ := m.Get(tt.name); return s.Ready || s.Status != apitype.StatusRunning })
			if s := get(t, m, tt.name); !s.Ready {
				t.Fatalf("service = %+v, want ready", s)
			}
			if err := m.Stop(t.Context(), tt.name); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDescribeHolderAndDialAddr(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"0.0.0.0", "127.0.0.1"}, {"::", "::1"}, {"127.0.0.1", "127.0.0.1"}, {"::ffff:127.0.0.1", "127.0.0.1"}, {"10.1.2.3", "10.1.2.3"}, {"bogus", "127.0.0.1"},
	} {
		if got := dialAddr(tt.in).String(); got != tt.want {
			t.Errorf("dialAddr(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, tt := range []struct {
		in   string
		want int
	}{
		{"http://localhost:3000/x", 3000}, {"http://localhost/", 80}, {"https://x/", 443}, {"HTTP://x/", 80}, {"http://x:0/", 0}, {"http://x:99999/", 0}, {"ftp://x/", 0},
	} {
		if got := urlPort(tt.in); got != tt.want {
			t.Errorf("urlPort(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}
