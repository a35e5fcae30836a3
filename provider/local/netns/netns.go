// Package netns is the local engine's reach into a sandbox's network namespace:
// running a function on an OS thread that entered it (a socket belongs to the
// namespace it was created in, so no process inside is needed), dialing its
// loopback, forwarding a host listener's connections to it (tunnels), and serving
// the egress proxy on its loopback. Package local, the engine, is its one importer:
// the engine dials ports (DialPort) and the sandbox's shim serves tunnels and egress.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Do runs fn on an OS thread that entered the network namespace nsfd, and waits for
// it. A thread that cannot go back to its own namespace is never reused: it stays
// locked and exits with its goroutine.
func Do(nsfd int, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer unix.Close(self)
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("setns: %w", err)
			return
		}
		err = fn()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// Dial connects to the TCP address addr in the network namespace nsfd, or, with
// nsfd < 0, in the caller's own; the connection, once made, is used from any thread.
func Dial(ctx context.Context, nsfd int, addr string) (net.Conn, error) {
	if nsfd < 0 {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	var c net.Conn
	err := Do(nsfd, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// ServeTunnel forwards every connection of the host listener ln to port on the
// loopback of the network namespace nsfd, or, with nsfd < 0, on the loopback of the
// caller's own namespace (an unisolated sandbox, or one on the host's network). It
// returns when ln is closed.
func ServeTunnel(ln net.Listener, nsfd, port int) {
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
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			in, err := Dial(ctx, nsfd, addr)
			cancel()
			if err != nil {
				return
			}
			defer in.Close()
			portfwd.Splice(c, in)
		}()
	}
}

// ServeEgress serves the egress proxy of cfg on 127.0.0.1:rules.PortEgressProxy inside
// the network namespace nsfd: the listening socket is made there, and served by the
// caller's process for as long as it lives. Upstream connections and name lookups
// are the caller's namespace's (the host's).
func ServeEgress(nsfd int, cfg egress.Config) error {
	g, err := egress.New(cfg)
	if err != nil {
		return err
	}
	var ln net.Listener
	err = Do(nsfd, func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(rules.PortEgressProxy))
		return err
	})
	if err != nil {
		return fmt.Errorf("egress proxy: %w", err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return nil
}

// ProxyEnv is the environment of every command of a sandbox with egress: the proxy
// variables that name ServeEgress's address.
func ProxyEnv() map[string]string { return egress.Env(rules.PortEgressProxy) }
