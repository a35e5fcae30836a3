package local

// Reaching ports inside a sandbox: DialPort creates its socket on an OS thread that
// has entered the sandbox's network namespace (a socket belongs to the namespace it
// was created in), so no process inside is needed. Tunnels are host listeners on
// 127.0.0.1, made by the engine on the host's network and served by the sandbox's init
// from inside: they outlive the controlling process and die with the sandbox.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
)

// DialPort connects to 127.0.0.1:port inside the sandbox. A sandbox with the host's
// network (Spec.Network, or unisolated) is dialed on the host's loopback.
func (e *Engine) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("dial port %d: out of range", port)
	}
	_, st, err := e.running(id)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if !st.NetNS {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	nsfd, err := unix.Open("/proc/"+strconv.Itoa(st.Pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dial port %d in sandbox %s: %w", port, id, err)
	}
	defer unix.Close(nsfd)
	if !st.InitAlive() {
		return nil, fmt.Errorf("dial port %d in sandbox %s: it is gone", port, id)
	}
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := dialInNetns(ctx, nsfd, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("dial port %d in sandbox %s: %w", port, id, r.err)
	}
	return r.c, nil
}

// dialInNetns dials addr from a locked thread moved into the namespace nsfd and moves
// the thread back; a thread that cannot go back is never reused (it stays locked and
// exits with its goroutine).
func dialInNetns(ctx context.Context, nsfd int, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer unix.Close(self)
	if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("setns: %w", err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if unix.Setns(self, unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return c, err
}

// serveTunnel, in init, forwards every connection of a host listener to port on the
// sandbox's own loopback.
func serveTunnel(ln net.Listener, port int) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			in, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return
			}
			defer in.Close()
			portfwd.Splice(c, in)
		}()
	}
}
