package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// routes registers every endpoint. Everything but GET /api/health sits behind
// requireAuth; TestRoutesMatchContract (routes_test.go) checks this list
// against the contract, route by route.
func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	// StripSlashes and GetHead keep what the old Express server accepted:
	// "/api/health/" and HEAD requests.
	r.Use(s.recoverer, s.gate, cors, middleware.StripSlashes, middleware.GetHead)
	r.NotFound(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return fault.New(http.StatusNotFound, "Not found")
	}))
	r.MethodNotAllowed(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return fault.New(http.StatusMethodNotAllowed, "Method not allowed")
	}))

	r.Get("/api/health", s.handle(s.health))

	r.Group(func(r chi.Router) {
		r.Use(s.requireAuth)
		r.Get("/api/auth/check", s.handle(s.authCheck))

		r.Get("/api/services", s.handle(s.listServices))
		r.Post("/api/services", s.handle(s.startService))
		r.Get("/api/services/{name}", s.handle(s.getService))
		r.Delete("/api/services/{name}", s.handle(s.stopService))
		r.Post("/api/services/{name}/restart", s.handle(s.restartService))
		r.Get("/api/logs/{name}", s.handle(s.logs))
		r.Get("/api/events", s.handle(s.events))

		r.Post("/api/expose", s.handle(s.expose))
		r.Get("/api/expose", s.handle(s.exposeStatus))

		r.Get("/api/git/repos", s.handle(s.gitRepos))
		r.Get("/api/git/status", s.handle(s.gitStatus))
		r.Get("/api/git/diff", s.handle(s.gitDiff))
		r.Get("/api/git/bundle", s.handle(s.gitBundle))
		// A bundle is no JSON request: the git leaf bounds it (413), not the 1 MiB
		// cap, and up to 256 MiB gets longer than the 30 s read timeout.
		r.With(s.allowBody(rules.MaxGitBundleBytes+1, rules.BundleReadTimeout)).Post("/api/git/bundle", s.handle(s.gitApplyBundle))
		r.Get("/api/git/changeset", s.handle(s.gitChangeset))

		r.Get("/api/ports", s.handle(s.ports))

		r.Get("/api/terminal", s.handle(s.terminal))
		r.Get("/api/terminal/sessions", s.handle(s.terminalSessions))

		r.Get("/api/debug/stats", s.handle(s.debugStats))
	})
	return r
}

var errNotImplemented = fault.New(http.StatusNotImplemented, "not available in this sidecar")
