package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
	"github.com/proliferate-ai/sandbox-mcp/rules"
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

// serviceError maps the manager's errors, each with the manager's message:
// invalid requests are 400 (a value out of bounds also names its "field"),
// unknown names 404, a new name beyond the service cap 409; anything else is
// a 500 that still says what failed, so an agent can act on it.
func serviceError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, services.ErrInvalid):
		e := &Error{Status: http.StatusBadRequest, Msg: err.Error()}
		if le := (*rules.LimitError)(nil); errors.As(err, &le) {
			e.Fields = map[string]any{"field": le.Field}
		}
		return e
	case errors.Is(err, services.ErrConflict):
		return &Error{Status: http.StatusConflict, Msg: err.Error()}
	case errors.Is(err, services.ErrNotFound):
		return &Error{Status: http.StatusNotFound, Msg: err.Error()}
	case errors.Is(err, context.Canceled):
		return &Error{Status: http.StatusServiceUnavailable, Msg: "request canceled", Err: err}
	}
	return &Error{Status: http.StatusInternalServerError, Msg: err.Error(), Err: err}
}

// listVersioner is a Services that tells cheaply whether its list may have
// changed (services.Manager): listServices then reuses the encoded answer.
type listVersioner interface {
	// ListVersion changes whenever List's result may have changed.
	ListVersion() uint64
}

// encodedList is the GET /api/services body for one ListVersion.
type encodedList struct {
	version uint64
	body    []byte
}

func (s *Server) listServices(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Services == nil {
		return errNotImplemented
	}
	lv, ok := s.opts.Services.(listVersioner)
	if !ok {
		writeJSON(w, http.StatusOK, s.servicesResponse())
		return nil
	}
	// The version is read before List, so a cached body is never older than its version.
	v := lv.ListVersion()
	c := s.listCache.Load()
	if c == nil || c.version != v {
		body, err := marshalJSON(s.servicesResponse())
		if err != nil {
			return err
		}
		c = &encodedList{version: v, body: body}
		s.listCache.Store(c)
	}
	writeJSONBody(w, http.StatusOK, c.body)
	return nil
}

func (s *Server) servicesResponse() apitype.ServicesResponse {
	list, port := s.opts.Services.List()
	if list == nil {
		list = []apitype.ServiceInfo{}
	}
	return apitype.ServicesResponse{Services: list, ExposedPort: port}
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
