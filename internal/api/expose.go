package api

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strconv"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// Exposer routes the preview site to a port: the preview proxy follows the
// port, and Caddy routes the preview site to the proxy.
type Exposer interface {
	// SetExposedPort records port (it survives a restart) and points the
	// preview proxy at it.
	SetExposedPort(port int) error
	// EnsureRouted makes Caddy route the preview site to the preview proxy;
	// its error says what failed.
	EnsureRouted(ctx context.Context) error
	// ExposeStatus reports where the preview site currently goes.
	ExposeStatus(ctx context.Context) apitype.ExposeStatus
	// ExposedPort is the exposed port, nil when none is.
	ExposedPort() *int
}

// exposedPort is the exposed port as exposure holds it; nil without exposure.
func (s *Server) exposedPort() *int {
	if s.opts.Expose == nil {
		return nil
	}
	return s.opts.Expose.ExposedPort()
}

type exposeRequest struct {
	Port json.RawMessage `json:"port"`
}

// parsePort accepts a JSON number that is an integer 1–65535.
func parsePort(raw json.RawMessage) (int, error) {
	var n json.Number
	if len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &n) != nil || n == "" {
		return 0, fault.New(http.StatusBadRequest, "port must be a number")
	}
	f, err := strconv.ParseFloat(n.String(), 64)
	if err != nil || f != math.Trunc(f) || f < 1 || f > 65535 {
		return 0, fault.New(http.StatusBadRequest, "port must be an integer between 1 and 65535")
	}
	return int(f), nil
}

func (s *Server) expose(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Expose == nil {
		return errNotImplemented
	}
	var req exposeRequest
	if err := s.decode(w, r, &req); err != nil {
		return err
	}
	port, err := parsePort(req.Port)
	if err != nil {
		return err
	}
	if err := s.opts.Expose.SetExposedPort(port); err != nil {
		return err
	}
	if err := s.opts.Expose.EnsureRouted(r.Context()); err != nil {
		return &fault.Error{
			Status: http.StatusBadGateway,
			Msg:    "port " + strconv.Itoa(port) + " is exposed on the preview proxy, but Caddy does not route the preview site to it: " + err.Error(),
			Fields: map[string]any{"exposedPort": port},
			Err:    err,
		}
	}
	writeJSON(w, http.StatusOK, apitype.ExposeResponse{Success: true, ExposedPort: port})
	return nil
}

func (s *Server) exposeStatus(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Expose == nil {
		return errNotImplemented
	}
	writeJSON(w, http.StatusOK, s.opts.Expose.ExposeStatus(r.Context()))
	return nil
}
