package api

import (
	"context"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/provider/apitype"
)

// Services is the service manager as the API sees it.
type Services interface {
	// List returns the services in the order their names were first started, and the exposed port.
	List() ([]apitype.ServiceInfo, *int)
	Get(name string) (apitype.ServiceInfo, error)
	Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error)
	Stop(ctx context.Context, name string) error
	Restart(ctx context.Context, name string) (apitype.ServiceInfo, error)
}

// EventSource feeds GET /api/events.
type EventSource interface{}

func (s *Server) listServices(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) startService(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) getService(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) stopService(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) restartService(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}
