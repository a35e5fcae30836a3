package api

import (
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, apitype.StatusResponse{Status: "ok", Version: s.opts.Version})
	return nil
}

// authCheck is Caddy's forward_auth target: requireAuth already decided, and
// nothing but the Authorization header matters (not the query, not Upgrade).
func (s *Server) authCheck(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, apitype.StatusResponse{Status: "ok"})
	return nil
}
