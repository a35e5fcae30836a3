package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// Services is the service manager as the API sees it.
type Services interface {
	// List returns the services in the order their names were first started.
	List() []apitype.ServiceInfo
	Get(name string) (apitype.ServiceInfo, error)
	Start(ctx context.Context, req apitype.StartServiceRequest) (apitype.ServiceInfo, error)
	Stop(ctx context.Context, name string) error
	Restart(ctx context.Context, name string) (apitype.ServiceInfo, error)
}

// serviceError answers the manager's errors: its *fault.Error as it is
// (invalid requests 400 naming the "field" out of bounds, unknown names 404,
// a new name beyond the service cap 409), a canceled request 503, and
// anything else a 500 whose message is the manager's, so an agent can act
// on it.
func serviceError(err error) error {
	var fe *fault.Error
	if err == nil || errors.As(err, &fe) || errors.Is(err, context.Canceled) {
		return err
	}
	return &fault.Error{Status: http.StatusInternalServerError, Msg: err.Error(), Err: err}
}

// listVersioner is a Services that tells cheaply whether its list may have
// changed (services.Manager): listServices then reuses the encoded answer.
type listVersioner interface {
	// ListVersion changes whenever List's result may have changed.
	ListVersion() uint64
}

// encodedList is the GET /api/services body for one ListVersion and exposed port.
type encodedList struct {
	version uint64
	port    int // 0: none
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
	port := 0
	if p := s.exposedPort(); p != nil {
		port = *p
	}
	c := s.listCache.Load()
	if c == nil || c.version != v || c.port != port {
		body, err := marshalJSON(s.servicesResponse())
		if err != nil {
			return err
		}
		c = &encodedList{version: v, port: port, body: body}
		s.listCache.Store(c)
	}
	writeJSONBody(w, http.StatusOK, c.body)
	return nil
}

// servicesResponse is the services of the manager with the port of exposure.
func (s *Server) servicesResponse() apitype.ServicesResponse {
	list := s.opts.Services.List()
	if list == nil {
		list = []apitype.ServiceInfo{}
	}
	return apitype.ServicesResponse{Services: list, ExposedPort: s.exposedPort()}
}

func (s *Server) startService(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Services == nil {
		return errNotImplemented
	}
	var req apitype.StartServiceRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	// Validated once, where it enters the service manager (Start).
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
