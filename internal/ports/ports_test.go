package ports

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestParseNetTCP(t *testing.T) {
	const v4 = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0FA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 100 0 0 10 0
   2: 0100007F:C536 0100007F:B22D 01 00000000:00000000 03:000015D1 00000000     0        0 0 3 0000000000000000
`
	const v6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:0FA1 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 43 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:0FA2 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 44 1 0000000000000000 100 0 0 10 0
`
	got4, err := ParseNetTCP([]byte(v4), apitype.FamilyIPv4)
	if err != nil {
		t.Fatalf("ParseNetTCP(v4): %v", err)
	}
	want4 := []Socket{
		{apitype.FamilyIPv4, netip.MustParseAddr("0.0.0.0"), 4000, StateListen, 12345},
		{apitype.FamilyIPv4, netip.MustParseAddr("127.0.0.1"), 8080, StateListen, 777},
		{apitype.FamilyIPv4, netip.MustParseAddr("127.0.0.1"), 50486, 1, 0},
	}
	if diff := cmp.Diff(want4, got4, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("ParseNetTCP(v4) mismatch (-want +got):\n%s", diff)
	}
	got6, err := ParseNetTCP([]byte(v6), apitype.FamilyIPv6)
	if err != nil {
		t.Fatalf("ParseNetTCP(v6): %v", err)
	}
	want6 := []Socket{
		{apitype.FamilyIPv6, netip.MustParseAddr("::"), 22, StateListen, 42},
		{apitype.FamilyIPv6, netip.MustParseAddr("::1"), 4001, StateListen, 43},
		{apitype.FamilyIPv6, netip.MustParseAddr("::ffff:127.0.0.1"), 4002, StateListen, 44},
	}
	if diff := cmp.Diff(want6, got6, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("ParseNetTCP(v6) mismatch (-want +got):\n%s", diff)
	}

	for _, bad := range []string{
		"   0: 00000000:0FA0 00000000:0000 0A\n",
		"   0: 0000000:0FA0 00000000:0000 0A 0 0 0 0 0 1\n",
		"   0: 00000000:FFFFF 00000000:0000 0A 0 0 0 0 0 1\n",
		"   0: 00000000:0FA0 00000000:0000 ZZ 0 0 0 0 0 1\n",
		"   0: 00000000:0FA0 00000000:0000 0A 0 0 0 0 0 x\n",
		"   0: 0000000G:0FA0 00000000:0000 0A 0 0 0 0 0 1\n",
	} {
		if _, err := ParseNetTCP([]byte(bad), apitype.FamilyIPv4); err == nil {
			t.Errorf("ParseNetTCP(%q) = nil error, want one", bad)
		}
	}
}

// FuzzParseNetTCP: any input parses or fails cleanly.
func FuzzParseNetTCP(f *testing.F) {
	f.Add([]byte("  sl  local_address rem_address st\n   0: 00000000:0FA0 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 1 1\n"))
	f.Add([]byte("   0: 00000000000000000000000001000000:0FA1 00000000000000000000000000000000:0000 0A 0 0 0 0 0 43\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		socks, err := ParseNetTCP(b, apitype.FamilyIPv4)
		if err != nil {
			return
		}
		for _, s := range socks {
			if !s.Addr.IsValid() || s.Port < 0 || s.Port > 65535 {
				t.Fatalf("ParseNetTCP(%q) gave %+v", b, s)
			}
		}
	})
}

func TestServiceFromEnviron(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"A=1\x00SANDBOX_MCP_SERVICE=web\x00B=2\x00", "web"},
		{"SANDBOX_MCP_SERVICE=api", "api"},
		{"XSANDBOX_MCP_SERVICE=no\x00", ""},
		{"SANDBOX_MCP_SERVICE_X=no\x00", ""},
	}
	for _, tt := range tests {
		if got := ServiceFromEnviron([]byte(tt.in)); got != tt.want {
			t.Errorf("ServiceFromEnviron(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func find(ls []Listener, port int) (Listener, bool) {
	i := slices.IndexFunc(ls, func(l Listener) bool { return l.Port == port })
	if i < 0 {
		return Listener{}, false
	}
	return ls[i], true
}

// poll lists until cond holds or the deadline passes.
func poll(t *testing.T, s *Scanner, what string, cond func([]Listener) bool) []Listener {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ls, err := s.List(t.Context())
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if cond(ls) {
			return ls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s; last list: %+v", what, ls)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServiceListenerAppearsAndGoes(t *testing.T) {
	s, err := New(Options{Logger: discard, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	cmd, port := testutil.HTTPServer(t, ServiceEnv+"=web")
	ls := poll(t, s, "listener appears", func(ls []Listener) bool { _, ok := find(ls, port); return ok })
	l, _ := find(ls, port)
	if l.PID != cmd.Process.Pid || l.Service != "web" || l.PGID != cmd.Process.Pid {
		t.Errorf("listener on %d = %+v, want pid %d, pgid %d, service web", port, l, cmd.Process.Pid, cmd.Process.Pid)
	}
	if l.Address != "127.0.0.1" || l.Family != apitype.FamilyIPv4 || l.Kind != "" {
		t.Errorf("listener on %d = %+v, want 127.0.0.1 ipv4 with no kind", port, l)
	}
	if !strings.Contains(l.Command, "http.server") || l.Name == "" {
		t.Errorf("listener on %d: name %q command %q, want python's", port, l.Name, l.Command)
	}

	testutil.KillGroup(cmd)
	poll(t, s, "listener goes", func(ls []Listener) bool { _, ok := find(ls, port); return !ok })
}

func TestSidecarAndIPv6(t *testing.T) {
	s, err := New(Options{Logger: discard, MaxAge: -1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	ls, err := s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	l, ok := find(ls, port)
	if !ok || l.PID != os.Getpid() || l.Kind != apitype.PortKindSidecar {
		t.Errorf("own listener on %d = %+v (found %v), want pid %d kind sidecar", port, l, ok, os.Getpid())
	}

	ln6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer ln6.Close()
	port6 := ln6.Addr().(*net.TCPAddr).Port
	ls, err = s.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := find(ls, port6); !ok || l.Address != "::1" || l.Family != apitype.FamilyIPv6 {
		t.Errorf("IPv6 listener on %d = %+v (found %v), want ::1 ipv6", port6, l, ok)
	}
}

func TestCache(t *testing.T) {
	now := time.Unix(1000, 0)
	s, err := New(Options{Logger: discard, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(t.Context()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	now = now.Add(999 * time.Millisecond)
	ls, _ := s.List(t.Context())
	if _, ok := find(ls, port); ok {
		t.Errorf("List() 999ms after a scan shows a new listener; want the cached scan")
	}
	now = now.Add(time.Millisecond)
	ls, _ = s.List(t.Context())
	if _, ok := find(ls, port); !ok {
		t.Errorf("List() 1s after a scan misses listener %d; want a fresh scan", port)
	}
	// The caller may modify its copy.
	ls[0].Port = -1
	if again, _ := s.List(t.Context()); again[0].Port == -1 {
		t.Errorf("List() returned the cache itself, want a copy")
	}
}

func TestKind(t *testing.T) {
	s := &Scanner{opts: Options{SelfPID: 100, SidecarPorts: []int{4000}}}
	tests := []struct {
		l    Listener
		want string
	}{
		{Listener{PID: 100, Port: 4000}, apitype.PortKindSidecar},
		{Listener{PID: 100, Port: 4001}, apitype.PortKindSidecar},
		{Listener{PID: 0, Port: 4000}, apitype.PortKindSidecar},
		{Listener{PID: 5, Port: 4000}, ""},
		{Listener{PID: 5, Name: "caddy", Port: 443}, apitype.PortKindCaddy},
		{Listener{PID: 5, Name: "sshd", Port: 2222}, apitype.PortKindSSHD},
		{Listener{Port: 22}, apitype.PortKindSSHD},
		{Listener{PID: 6, Name: "node", Port: 4096}, apitype.PortKindOpenCode},
		{Listener{PID: 6, Name: "node", Port: 3901}, apitype.PortKindVSCode},
		{Listener{PID: 6, Name: "node", Port: 3901, Service: "mine"}, ""},
		{Listener{PID: 6, Name: "node", Port: 3000}, ""},
	}
	for _, tt := range tests {
		if got := s.kind(tt.l); got != tt.want {
			t.Errorf("kind(%+v) = %q, want %q", tt.l, got, tt.want)
		}
	}
}

func TestNewNeedsLogger(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New(Options{}) = nil error, want one")
	}
	if _, err := New(Options{Logger: discard, Proc: t.TempDir()}); err == nil {
		t.Error("New with a proc lacking net/tcp = nil error, want one")
	}
}

func TestSocketInode(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		target string
		want   uint64
		ok     bool
	}{
		{"socket:[12345]", 12345, true},
		{"socket:[0]", 0, true},
		{"socket:[]", 0, false},
		{"socket:[12a]", 0, false},
		{"pipe:[123]", 0, false},
		{"/dev/null", 0, false},
		{"socket:[" + strings.Repeat("9", 80) + "]", 0, false}, // longer than the buffer
	}
	var buf [64]byte
	for i, tt := range tests {
		p := fmt.Sprintf("%s/%d", dir, i)
		if err := os.Symlink(tt.target, p); err != nil {
			t.Fatal(err)
		}
		got, ok := socketInode(p, buf[:])
		if got != tt.want || ok != tt.ok {
			t.Errorf("socketInode(-> %q) = %d, %v; want %d, %v", tt.target, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := socketInode(dir+"/missing", buf[:]); ok {
		t.Error("socketInode(missing) = ok, want not ok")
	}
}
