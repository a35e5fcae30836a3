package local

// A proxy whose host side is another network namespace than the test's: the tests of
// the egress policy build a "host" namespace of their own.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
)

// hostNet runs functions in the host's network namespace, hostFd, from a process
// whose own network namespace is another.
type hostNet struct{ host, own int }

func newHostNet(hostFd int) (*hostNet, error) {
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return &hostNet{host: hostFd, own: own}, nil
}

// do runs fn on an OS thread that entered the host's network namespace: sockets it
// creates and interfaces it lists are the host's. A thread that cannot return to
// the sandbox's namespace is never reused (it stays locked and exits with its
// goroutine).
func (h *hostNet) do(fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(h.host, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("setns: %w", err)
			return
		}
		err := fn()
		if unix.Setns(h.own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

func (h *hostNet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.do(func() error {
		var err error
		d := net.Dialer{Timeout: 30 * time.Second}
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

func (h *hostNet) addrs() (map[netip.Addr]bool, error) {
	var out map[netip.Addr]bool
	err := h.do(func() error {
		var err error
		out, err = egress.LocalAddrs()
		return err
	})
	return out, err
}

// newEgressProxy is the proxy of a sandbox whose host network namespace is hostFd and
// whose Spec.EgressHosts is hosts; lookup nil resolves with the host's resolver.
// close releases what it holds.
func newEgressProxy(hostFd int, hosts []string, lookup func(context.Context, string) ([]netip.Addr, error)) (g *egress.Proxy, close func(), err error) {
	h, err := newHostNet(hostFd)
	if err != nil {
		return nil, nil, err
	}
	g, err = egress.New(egress.Config{Hosts: hosts, Dial: h.dial, LocalAddrs: h.addrs, Lookup: lookup})
	if err != nil {
		unix.Close(h.own)
		return nil, nil, err
	}
	return g, func() { g.Close(); unix.Close(h.own) }, nil
}
