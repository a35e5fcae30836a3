package netns

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// newNetns makes a network namespace with its loopback up, held by a child process
// until the test ends, and returns a descriptor of it.
func newNetns(t *testing.T) int {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a network namespace needs root")
	}
	hold := exec.Command("sleep", "600")
	hold.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := hold.Start(); err != nil {
		t.Fatalf("make a network namespace: %v", err)
	}
	t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
	nsfd, err := unix.Open("/proc/"+strconv.Itoa(hold.Process.Pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(nsfd) })
	err = Do(nsfd, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_UP)
		return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	})
	if err != nil {
		t.Fatalf("bring the namespace's loopback up: %v", err)
	}
	return nsfd
}

// echoIn listens on the namespace's loopback and answers each line with "ns:" and the
// line; it returns the port.
func echoIn(t *testing.T, nsfd int) int {
	t.Helper()
	var ln net.Listener
	if err := Do(nsfd, func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, "ns:"+line)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func roundTrip(t *testing.T, c net.Conn) string {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "hello\n"); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	return line
}

// TestDialAndTunnel: a listener made with Do lives in the namespace, Dial reaches it,
// and a host listener's connections reach it through ServeTunnel.
func TestDialAndTunnel(t *testing.T) {
	nsfd := newNetns(t)
	port := echoIn(t, nsfd)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := Dial(t.Context(), nsfd, addr)
	if err != nil {
		t.Fatalf("Dial(%s) in the namespace: %v", addr, err)
	}
	if got := roundTrip(t, c); got != "ns:hello\n" {
		t.Errorf("through Dial = %q, want ns:hello", got)
	}
	// The host's loopback is another one: the namespace's listener is not there.
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		io.WriteString(c, "hello\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line == "ns:hello\n" {
			t.Error("the namespace's listener answered on the host's loopback")
		}
	}
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); ServeTunnel(host, nsfd, port) }()
	for range 3 {
		c, err := net.Dial("tcp", host.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if got := roundTrip(t, c); got != "ns:hello\n" {
			t.Errorf("through the tunnel = %q, want ns:hello", got)
		}
	}
	host.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Error("ServeTunnel did not return after its listener closed")
	}
}

// TestDoRefusesABadNamespace: a descriptor that is not a network namespace fails
// with the reason, and the thread is not left in a foreign namespace.
func TestDoRefusesABadNamespace(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ran := false
	if err := Do(int(f.Fd()), func() error { ran = true; return nil }); err == nil || ran {
		t.Errorf("Do on /dev/null = %v (ran %v), want a setns error and fn not run", err, ran)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := Dial(ctx, int(f.Fd()), "127.0.0.1:1"); err == nil {
		t.Error("Dial on /dev/null succeeded")
	}
}

// TestDialOwnNamespace: with no namespace (nsfd < 0) Dial reaches the caller's own
// loopback, as the tunnels of an unisolated sandbox do.
func TestDialOwnNamespace(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := Dial(t.Context(), -1, ln.Addr().String())
	if err != nil {
		t.Fatalf("Dial(-1, %s) = %v", ln.Addr(), err)
	}
	defer c.Close()
	in, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	if in.RemoteAddr().String() != c.LocalAddr().String() {
		t.Errorf("the host listener accepted %s, want the dialed %s", in.RemoteAddr(), c.LocalAddr())
	}
}
