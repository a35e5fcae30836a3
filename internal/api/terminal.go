package api

import "net/http"

// Terminal runs PTY sessions for WebSocket clients.
type Terminal interface{}

func (s *Server) terminal(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}

func (s *Server) terminalSessions(w http.ResponseWriter, r *http.Request) error {
	return errNotImplemented
}
