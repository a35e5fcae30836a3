package services

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/ports"
)

// ownerScanInterval spaces the port-owner lookups of one probe: a lookup
// costs ~0.5 ms when the run holds the port, but ~12 ms (a walk of every
// process's descriptors, or /proc/net/tcp without netlink) when another
// process does.
const ownerScanInterval = 250 * time.Millisecond

// portOwner decides whether the process listening on a probed port belongs
// to a run: a TCP or HTTP readiness probe counts only then, so a port held
// by anything else (a previous run's orphan, another service, a system
// daemon) never makes a service ready.
type portOwner struct {
	in      *instance
	scanner *ports.Scanner
	last    time.Time
	lastErr error
	// runPIDs caches the run's processes, found by walking /proc; it is the
	// last resort for a holder that dropped the run's marker and group.
	runPIDs   []int
	runPIDsAt time.Time
}

func newPortOwner(in *instance) (*portOwner, error) {
	s, err := ports.New(ports.Options{Logger: slog.New(slog.DiscardHandler), MaxAge: -1})
	if err != nil {
		return nil, err
	}
	return &portOwner{in: in, scanner: s}, nil
}

// check returns nil when a process of the run listens on port, and the
// address to reach it; otherwise an error naming who holds the port.
func (o *portOwner) check(ctx context.Context, port int) (netip.Addr, error) {
	if !o.last.IsZero() && time.Since(o.last) < ownerScanInterval && o.lastErr != nil {
		return netip.Addr{}, o.lastErr
	}
	addr, err := o.scan(ctx, port)
	o.last, o.lastErr = time.Now(), err
	return addr, err
}

func (o *portOwner) scan(ctx context.Context, port int) (netip.Addr, error) {
	ls, err := o.scanner.Port(ctx, port, o.in.t.pgid)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("look up who listens on port %d: %w", port, err)
	}
	if len(ls) == 0 {
		return netip.Addr{}, fmt.Errorf("nothing listens on port %d", port)
	}
	for _, l := range ls {
		if o.ours(l) {
			return dialAddr(l.Address), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("port %d is held by %s, not by this service", port, describeHolder(ls[0]))
}

// ours reports whether l's owner is a process of the run: it carries the
// run's marker, is in its process group, or descends from it.
func (o *portOwner) ours(l ports.Listener) bool {
	t := o.in.t
	switch {
	case l.PID == 0:
		return false
	case t.instance != "" && l.Instance == t.instance:
		return true
	case t.pgid > 0 && l.PGID == t.pgid:
		return true
	}
	if time.Since(o.runPIDsAt) >= time.Second {
		o.runPIDs, _ = findProcs(t)
		o.runPIDsAt = time.Now()
	}
	return slices.Contains(o.runPIDs, l.PID)
}

// describeHolder names the process behind a listener for a readiness reason.
func describeHolder(l ports.Listener) string {
	if l.PID == 0 {
		return "a process this sidecar cannot see"
	}
	cmd := strings.Join(strings.Fields(l.Command), " ")
	if cmd == "" {
		cmd = l.Name
	}
	if len(cmd) > 200 {
		cmd = cmd[:200] + "…"
	}
	s := fmt.Sprintf("pid %d (%s)", l.PID, cmd)
	if l.Service != "" {
		s += fmt.Sprintf(" of service %q", l.Service)
	}
	return s
}

// dialAddr is where to connect to a listener bound to addr: the loopback
// address of its family when it listens on every address.
func dialAddr(addr string) netip.Addr {
	a, err := netip.ParseAddr(addr)
	switch {
	case err != nil:
		return netip.MustParseAddr("127.0.0.1")
	case a.Is4() && a.IsUnspecified():
		return netip.MustParseAddr("127.0.0.1")
	case a.IsUnspecified():
		return netip.IPv6Loopback()
	}
	return a.Unmap()
}

// ownTCPCheck is the readiness check of {"tcp": port}: something accepts
// connections on the port's loopback addresses, and that something is a
// process of the run, which accepts a connection itself.
func ownTCPCheck(in *instance, port int) func() error {
	o, err := newPortOwner(in)
	if err != nil {
		return func() error { return err }
	}
	return func() error {
		// Cheap first: no /proc scan until something accepts at all.
		if err := checkTCP(port); err != nil {
			return err
		}
		addr, err := o.check(in.ctx, port)
		if err != nil {
			return err
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)), 200*time.Millisecond)
		if err != nil {
			return fmt.Errorf("this service listens on port %d but refuses connections: %w", port, err)
		}
		c.Close()
		return nil
	}
}

// ownHTTPCheck is the readiness check of {"http": rawURL}: get answers 2xx or
// 3xx, and a process of the run listens on the URL's port.
func ownHTTPCheck(in *instance, rawURL string, get func() error) func() error {
	port := urlPort(rawURL)
	o, err := newPortOwner(in)
	if err != nil {
		return func() error { return err }
	}
	return func() error {
		if err := get(); err != nil {
			return err
		}
		if port == 0 {
			return fmt.Errorf("readiness URL %q has no usable port", rawURL)
		}
		_, err := o.check(in.ctx, port)
		return err
	}
}

// urlPort is the TCP port of an http(s) URL, 0 when it has none.
func urlPort(raw string) int {
	u, err := url.Parse(raw)
	if err != nil {
		return 0
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return 0
		}
		return n
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}
