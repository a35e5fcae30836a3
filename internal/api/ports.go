package api

import (
	"context"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/ports"
)

// Ports lists the TCP ports listening in the sandbox.
type Ports interface {
	List(ctx context.Context) ([]ports.Listener, error)
}

// ports answers GET /api/ports. A listener belongs to a service when its
// process carries the service marker in its environment, or else when its
// process group is a running service's (services are process groups, so a
// service's pid is its group id). Exposed compares with the exposed port.
func (s *Server) ports(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Ports == nil {
		return errNotImplemented
	}
	ls, err := s.opts.Ports.List(r.Context())
	if err != nil {
		return err
	}
	var exposed *int
	byPGID := map[int]string{}
	if s.opts.Services != nil {
		var svcs []apitype.ServiceInfo
		svcs, exposed = s.opts.Services.List()
		for _, svc := range svcs {
			if svc.Status == apitype.StatusRunning && svc.PID > 0 {
				byPGID[svc.PID] = svc.Name
			}
		}
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
			Exposed: exposed != nil && *exposed == l.Port,
		}
		if p.Service == "" && l.PGID > 0 {
			p.Service = byPGID[l.PGID]
		}
		out = append(out, p)
	}
	writeJSON(w, http.StatusOK, apitype.PortsResponse{Ports: out})
	return nil
}
