package api

import (
	"context"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// Ports lists the TCP ports listening in the sandbox (internal/ports).
type Ports interface {
	// Ports returns the listening sockets; serviceOf names the service of a
	// process group for sockets whose process carries no service marker.
	Ports(ctx context.Context, serviceOf func(pgid int) string) ([]apitype.Port, error)
}

// ports answers GET /api/ports. A listener belongs to a service when its
// process carries the service marker in its environment, or else when its
// process group is a running service's (services are process groups, so a
// service's pid is its group id). Exposed compares with the exposed port.
func (s *Server) ports(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Ports == nil {
		return errNotImplemented
	}
	byPGID := map[int]string{}
	if s.opts.Services != nil {
		for _, svc := range s.opts.Services.List() {
			if svc.Status == apitype.StatusRunning && svc.PID > 0 {
				byPGID[svc.PID] = svc.Name
			}
		}
	}
	out, err := s.opts.Ports.Ports(r.Context(), func(pgid int) string { return byPGID[pgid] })
	if err != nil {
		return err
	}
	if exposed := s.exposedPort(); exposed != nil {
		for i := range out {
			out[i].Exposed = out[i].Port == *exposed
		}
	}
	writeJSON(w, http.StatusOK, apitype.PortsResponse{Ports: out})
	return nil
}
