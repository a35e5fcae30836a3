package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/internal/services"
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

// serviceError maps the manager's errors: invalid requests are 400, unknown
// names 404, both with the manager's message; anything else is a 500 that
// still says what failed, so an agent can act on it.
func serviceError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, services.ErrInvalid):
		return &Error{Status: http.StatusBadRequest, Msg: err.Error()}
	case errors.Is(err, services.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Msg: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusServiceUnavailable, Msg: "request canceled", Err: err}
	}
	return &Error{Status: http.StatusInternalServerError, Msg: err.Error(), Err: err}
}

func (s *Server) listServices(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Services == nil {
		return errNotImplemented
	}
	list, port := s.opts.Services.List()
	if list == nil {
		list = []apitype.ServiceInfo{}
	}
	writeJSON(w, http.StatusOK, apitype.ServicesResponse{Services: list, ExposedPort: port})
	return nil
}

func (s *Server) startService(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Services == nil {
		return errNotImplemented
	}
	var req apitype.StartServiceRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	if req.Name == "" || req.Command == "" {
		return errorf(http.StatusBadRequest, "name and command are required")
	}
	info, err := s.opts.Services.Start(r.Context(), req)
	if err != nil {
		return serviceError(err)
	}
	writeJSON(w, http.StatusOK, apitype.ServiceResponse{Service: info})
	return nil
}

func (s *Server) getService(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Services == nil {
		return errNotImplemented
	}
	info, err := s.opts.Services.Get(pathParam(r, "name"))
	if err != nil {
		return serviceError(err)
	}
	writeJSON(w, http.StatusOK, apitype.ServiceResponse{Service: info})
	return nil
}

func (s *Server) stopService(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Services == nil {
		return errNotImplemented
	}
	if err := s.opts.Services.Stop(r.Context(), pathParam(r, "name")); err != nil {
		return serviceError(err)
	}
	writeJSON(w, http.StatusOK, apitype.SuccessResponse{Success: true})
	return nil
}

func (s *Server) restartService(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Services == nil {
		return errNotImplemented
	}
	info, err := s.opts.Services.Restart(r.Context(), pathParam(r, "name"))
	if err != nil {
		return serviceError(err)
	}
	writeJSON(w, http.StatusOK, apitype.ServiceResponse{Service: info})
	return nil
}
