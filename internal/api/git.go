package api

import "net/http"

// Git answers the workspace's git questions.
type Git interface{}

func (s *Server) gitRepos(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) gitStatus(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) gitDiff(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}
