package api

import "net/http"

// Ports lists the TCP ports listening in the sandbox.
type Ports interface{}

func (s *Server) ports(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}
