package ports

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// procListeners reads the listening sockets from /proc/net/tcp{,6}.
func procListeners(t *testing.T) []Socket {
	t.Helper()
	var out []Socket
	for _, f := range []struct{ name, family string }{{"tcp", apitype.FamilyIPv4}, {"tcp6", apitype.FamilyIPv6}} {
		b, err := os.ReadFile(filepath.Join("/proc/net", f.name))
		if err != nil {
			continue
		}
		ss, err := ParseNetTCP(b, f.family)
		if err != nil {
			t.Fatal(err)
		}
		for _, so := range ss {
			if so.State == StateListen {
				out = append(out, so)
			}
		}
	}
	return out
}

func sortSockets(ss []Socket) []string {
	out := make([]string, len(ss))
	for i, so := range ss {
		out[i] = fmt.Sprintf("%s %s %d %d %d", so.Family, so.Addr, so.Port, so.State, so.Inode)
	}
	slices.Sort(out)
	return out
}

// TestDiagMatchesProc: the netlink dump lists exactly the listening sockets
// /proc/net/tcp{,6} lists (retried: other processes may open or close
// listeners between the two reads), our own v4 and v6 listeners included.
func TestDiagMatchesProc(t *testing.T) {
	if _, err := diagListeners(syscall.AF_INET); errors.Is(err, errDiagUnsupported) {
		t.Skipf("no sock_diag here: %v", err)
	}
	ln4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln4.Close()
	ln6, err6 := net.Listen("tcp6", "[::1]:0")
	if err6 == nil {
		defer ln6.Close()
	}
	var diff string
	for range 5 {
		v4, err := diagListeners(syscall.AF_INET)
		if err != nil {
			t.Fatal(err)
		}
		v6, err := diagListeners(syscall.AF_INET6)
		if err != nil && !errors.Is(err, errDiagUnsupported) {
			t.Fatal(err)
		}
		got, want := sortSockets(append(v4, v6...)), sortSockets(procListeners(t))
		if slices.Equal(got, want) {
			port4 := ln4.Addr().(*net.TCPAddr).Port
			if !slices.ContainsFunc(v4, func(so Socket) bool { return so.Port == port4 && so.Addr == netip.MustParseAddr("127.0.0.1") }) {
				t.Errorf("our listener 127.0.0.1:%d missing from %v", port4, got)
			}
			if err6 == nil {
				port6 := ln6.Addr().(*net.TCPAddr).Port
				if !slices.ContainsFunc(v6, func(so Socket) bool { return so.Port == port6 && so.Addr == netip.IPv6Loopback() }) {
					t.Errorf("our listener [::1]:%d missing from %v", port6, got)
				}
			}
			return
		}
		diff = fmt.Sprintf("netlink %v\n/proc %v", got, want)
	}
	t.Errorf("netlink and /proc disagree five times:\n%s", diff)
}

// diagMsg builds one SOCK_DIAG_BY_FAMILY message.
func diagMsg(af byte, addr netip.Addr, port uint16, inode uint32) []byte {
	b := make([]byte, nlmHdrLen+diagMsgLen)
	binary.NativeEndian.PutUint32(b[0:], uint32(len(b)))
	binary.NativeEndian.PutUint16(b[4:], sockDiagByFamily)
	m := b[nlmHdrLen:]
	m[0], m[1] = af, StateListen
	binary.BigEndian.PutUint16(m[4:], port)
	a := addr.AsSlice()
	copy(m[8:], a)
	binary.NativeEndian.PutUint32(m[68:], inode)
	return b
}

func TestParseDiag(t *testing.T) {
	done := make([]byte, nlmHdrLen+4)
	binary.NativeEndian.PutUint32(done[0:], uint32(len(done)))
	binary.NativeEndian.PutUint16(done[4:], nlmsgDone)
	b := append(diagMsg(syscall.AF_INET, netip.MustParseAddr("127.0.0.1"), 8080, 77), diagMsg(syscall.AF_INET6, netip.IPv6Unspecified(), 22, 78)...)
	b = append(b, done...)
	var socks []Socket
	fin, err := parseDiag(b, &socks)
	if err != nil || !fin {
		t.Fatalf("parseDiag = %v, %v; want done", fin, err)
	}
	want := []string{"ipv4 127.0.0.1 8080 10 77", "ipv6 :: 22 10 78"}
	if got := sortSockets(socks); !slices.Equal(got, want) {
		t.Errorf("parseDiag sockets = %q, want %q", got, want)
	}
}

// FuzzParseDiag: any datagram parses without panicking.
func FuzzParseDiag(f *testing.F) {
	f.Add(diagMsg(syscall.AF_INET, netip.MustParseAddr("10.0.0.1"), 443, 9))
	f.Add([]byte{})
	f.Add([]byte{16, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var socks []Socket
		_, _ = parseDiag(b, &socks)
	})
}
