package e2bserver

import (
	"context"
	"net"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/portfwd"
)

// forward returns the address of sb's forwarder for port (a loopback listener
// whose connections reach the port inside the sandbox), starting it if needed.
func (s *Server) forward(sb *sandbox, port int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := sb.forwards[port]; ok {
		return f.Addr().String(), nil
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	eid := sb.engineID
	f := portfwd.Start(ln, func(ctx context.Context) (net.Conn, error) { return s.o.Engine.DialPort(ctx, eid, port) }, &s.wg)
	sb.forwards[port] = f
	return f.Addr().String(), nil
}
