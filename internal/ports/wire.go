package ports

import (
	"context"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// Ports returns List as GET /api/ports answers it. A socket belongs to the
// service named by its process's marker (SANDBOX_MCP_SERVICE), or else to
// serviceOf(its process group) when serviceOf is set (services are process
// groups). Exposed is left for the caller, who knows the exposed port.
func (s *Scanner) Ports(ctx context.Context, serviceOf func(pgid int) string) ([]apitype.Port, error) {
	ls, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]apitype.Port, 0, len(ls))
	for _, l := range ls {
		p := apitype.Port{
			Port:    l.Port,
			Address: l.Address,
			Family:  l.Family,
			PID:     l.PID,
			Command: l.Command,
			Service: l.Service,
			Kind:    l.Kind,
		}
		if p.Service == "" && l.PGID > 0 && serviceOf != nil {
			p.Service = serviceOf(l.PGID)
		}
		out = append(out, p)
	}
	return out, nil
}
