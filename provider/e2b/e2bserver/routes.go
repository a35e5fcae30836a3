package e2bserver

import (
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// routes is every route of the server. Every control-plane route but /health checks
// the API key (authAPI); every envd route but /health checks the sandbox's access
// token (envdAuthorized). TestRoutesAuthenticated lists them.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.apiRoutes() {
		mux.HandleFunc(r.pattern, s.authAPI(s.handle(r.h)))
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, e2bwire.APIError{Code: 404, Message: "not found"})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := s.envdSandboxID(r); id != "" {
			s.envd(w, r, id)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type route struct {
	pattern string
	h       func(w http.ResponseWriter, r *http.Request) error
}

func (s *Server) apiRoutes() []route {
	return []route{
		{"POST /sandboxes", s.create},
		{"GET /sandboxes", s.list(false)},
		{"GET /v2/sandboxes", s.list(true)},
		{"GET /sandboxes/{id}", s.get},
		{"DELETE /sandboxes/{id}", s.killHandler},
		{"POST /sandboxes/{id}/pause", s.pauseHandler},
		{"POST /sandboxes/{id}/resume", s.connect(true)},
		{"POST /sandboxes/{id}/connect", s.connect(false)},
		{"POST /sandboxes/{id}/timeout", s.setTimeout},
		{"POST /sandboxes/{id}/snapshots", s.createSnapshot},
		{"GET /snapshots", s.listSnapshots},
		{"GET /sandboxes/{id}/ports/{port}", s.ports},
	}
}
