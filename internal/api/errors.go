package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Error is an error with an HTTP status and a message safe to show the caller.
// Fields are merged into the JSON body next to "error".
type Error struct {
	Status int
	Msg    string
	Fields map[string]any
	// Err is the cause. It is logged; it is sent only with a 5xx status, so
	// that a server-side failure always says what failed.
	Err error
}

// Error is the message, then the cause unless the message already says it,
// so a logged line carries the cause once.
func (e *Error) Error() string {
	if e.Err != nil && !strings.Contains(e.Msg, e.Err.Error()) {
		return fmt.Sprintf("%s: %v", e.Msg, e.Err)
	}
	return e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// errorf returns an *Error with status and a formatted message.
func errorf(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// handlerFunc is a handler that returns its failure instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h: an *Error is written with its status and message, anything
// else is logged and answered with a 500 whose message is the error.
func (s *Server) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		s.writeError(w, r, err)
	}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var e *Error
	if !errors.As(err, &e) {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		e = &Error{Status: http.StatusInternalServerError, Msg: "internal error: " + err.Error(), Err: err}
	} else if e.Status >= 500 {
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", err)
	}
	msg := e.Msg
	// A 5xx without its cause leaves the caller nothing to act on.
	if e.Status >= 500 && e.Err != nil && !strings.Contains(msg, e.Err.Error()) {
		msg += ": " + e.Err.Error()
	}
	body := map[string]any{"error": msg}
	for k, v := range e.Fields {
		body[k] = v
	}
	writeJSON(w, e.Status, body)
}
