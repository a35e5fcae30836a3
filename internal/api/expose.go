package api

import "net/http"

// Exposer routes the preview site to a port (preview proxy and Caddy).
type Exposer interface{}

func (s *Server) expose(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) exposeStatus(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}
