package e2bserver

import (
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// routes is every route of the server. Every control-plane route but /health checks
// the API key (authAPI), the answer for a route this server lacks included; every
// envd route but /health checks the sandbox's access token or a /files URL's
// signature (envdAuthorized); a port host (<port>-<id>.<domain>) is public unless
// the sandbox has a traffic token (hostroute.go). TestRoutesAuthenticated lists them.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.apiRoutes() {
		mux.HandleFunc(r.pattern, s.authAPI(s.handle(r.h)))
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	// E2B's volume content API authenticates with a volume token, not the API key;
	// this server does not serve it and says so to whoever asks.
	mux.HandleFunc("/volumecontent/", s.handle(refuseVolumeContent))
	mux.HandleFunc("/", s.authAPI(func(w http.ResponseWriter, r *http.Request) {
		// A route E2B has and this server does not serve says so, rather than a bare
		// 404 the SDKs would blame on a sandbox or template.
		writeJSON(w, http.StatusNotImplemented, e2bwire.APIError{Code: 501,
			Message: r.Method + " " + r.URL.Path + " is not served by the local E2B server"})
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
			s.envd(w, r, id)
			return
		}
		if id := s.signedFor(r); id != "" {
			s.envd(w, r, id)
			return
		}
		if port, id, ok := hostTarget(r.Host); ok {
			if port == e2bwire.EnvdPort {
				s.envd(w, r, id)
			} else {
				s.proxyPort(w, r, id, port)
			}
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
		{"POST /sandboxes", s.create(false)},
		{"POST /v2/sandboxes", s.create(true)},
		{"GET /sandboxes", s.list(false)},
		{"GET /v2/sandboxes", s.list(true)},
		{"GET /sandboxes/{id}", s.get},
		{"DELETE /sandboxes/{id}", s.killHandler},
		{"POST /sandboxes/{id}/pause", s.pauseHandler},
		{"POST /sandboxes/{id}/resume", s.connect(deprecatedResume)},
		{"POST /sandboxes/{id}/connect", s.connect(connectV1)},
		{"POST /v2/sandboxes/{id}/connect", s.connect(connectV2)},
		{"POST /sandboxes/{id}/timeout", s.setTimeout},
		{"POST /sandboxes/{id}/snapshots", s.createSnapshot},
		{"POST /sandboxes/{id}/fork", s.forkHandler},
		{"GET /snapshots", s.listSnapshots},
		{"GET /sandboxes/{id}/ports/{port}", s.ports},
		{"POST /volumes", s.createVolume},
		{"GET /volumes", s.listVolumes},
		{"GET /volumes/{volumeID}", s.getVolume},
		{"DELETE /volumes/{volumeID}", s.destroyVolume},
	}
}
