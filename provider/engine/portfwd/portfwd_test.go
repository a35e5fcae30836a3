package portfwd

import (
	"bufio"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// A forwarded connection reaches the upstream both ways and half-closes: the
// upstream sees EOF when the client closes its write side and still answers.
func TestForwardHalfClose(t *testing.T) {
	up := listen(t)
	defer up.Close()
	go func() {
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's half-close
		_, _ = c.Write(append([]byte("got "), b...))
	}()
	var wg sync.WaitGroup
	f := Start(listen(t), func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", up.Addr().String())
	}, &wg)
	c, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("ping"))
	_ = c.(*net.TCPConn).CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "got ping" {
		t.Errorf("answer = %q, %v; want %q", got, err, "got ping")
	}
	f.Close()
	wg.Wait()
}

// Close ends open connections, refuses an upstream whose dial was under way,
// and leaves no goroutine (wg.Wait returns; goleak checks the rest).
func TestCloseEndsEverything(t *testing.T) {
	up := listen(t)
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	slow := make(chan struct{})
	var wg sync.WaitGroup
	var n int
	var mu sync.Mutex
	f := Start(listen(t), func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if !first {
			<-slow // a dial still under way at Close
		}
		var d net.Dialer
		return d.DialContext(context.Background(), "tcp", up.Addr().String())
	}, &wg)
	open, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = open.Write([]byte("echo\n"))
	if line, err := bufio.NewReader(open).ReadString('\n'); err != nil || line != "echo\n" {
		t.Fatalf("echo = %q, %v", line, err)
	}
	pending, err := net.Dial("tcp", f.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the second dial start
	f.Close()
	close(slow)
	wg.Wait()
	for _, c := range []net.Conn{open, pending} {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Errorf("connection still open after Close")
		}
		c.Close()
	}
	if _, err := net.DialTimeout("tcp", f.Addr().String(), time.Second); err == nil {
		t.Error("listener still accepts after Close")
	}
}
