package local

// Reaching ports inside a sandbox: DialPort creates its socket on an OS thread that
// has entered the sandbox's network namespace (netns.Dial), so no process inside is
// needed. Tunnels are host listeners on 127.0.0.1, made by the engine on the host's
// network and served by the sandbox's shim (or an unisolated init) with
// netns.ServeTunnel: they outlive the controlling process and die with the sandbox.

import (
	"context"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/local/netns"
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
	nsfd := -1 // the host's network
	if st.NetNS {
		nsfd, err = unix.Open("/proc/"+strconv.Itoa(st.Pid)+"/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("dial port %d in sandbox %s: %w", port, id, err)
		}
		defer unix.Close(nsfd)
		if !st.InitAlive() {
			return nil, fmt.Errorf("dial port %d in sandbox %s: it is gone", port, id)
		}
	}
	c, err := netns.Dial(ctx, nsfd, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("dial port %d in sandbox %s: %w", port, id, err)
	}
	return c, nil
}
