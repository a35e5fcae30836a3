package local

// Reaching ports inside a sandbox: DialPort creates its socket on an OS thread that
// has entered the sandbox's network namespace (a socket belongs to the namespace it
// was created in), so no process inside is needed. Tunnels are host listeners on
// 127.0.0.1 whose connections are spliced to DialPort connections.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
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
	if !initAlive(st) {
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

// serveTunnel forwards every connection of ln to port inside the sandbox until ln is
// closed.
func (e *Engine) serveTunnel(ln net.Listener, id string, port int) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		var conns sync.WaitGroup
		var mu sync.Mutex
		open := map[net.Conn]bool{}
		defer func() {
			// The tunnel is gone: so are its connections.
			mu.Lock()
			for c := range open {
				c.Close()
			}
			mu.Unlock()
			conns.Wait()
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				continue
			}
			mu.Lock()
			open[c] = true
			mu.Unlock()
			conns.Add(1)
			go func() {
				defer conns.Done()
				e.forward(c, id, port)
				mu.Lock()
				delete(open, c)
				mu.Unlock()
			}()
		}
	}()
}

func (e *Engine) forward(c net.Conn, id string, port int) {
	defer c.Close()
	in, err := e.DialPort(context.Background(), id, port)
	if err != nil {
		e.log.Debug("tunnel", "sandbox_id", id, "port", port, "err", err)
		return
	}
	defer in.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go pipe(in, c)
	go pipe(c, in)
	<-done
	<-done
}
