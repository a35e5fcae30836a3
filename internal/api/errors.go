package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// handlerFunc is a handler that returns its failure instead of writing it.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// handle adapts h: a *fault.Error anywhere in the returned chain is written
// with its status and message, anything else is logged and answered with a
// 500 whose message is the error.
func (s *Server) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		s.writeError(w, r, err)
	}
}

// asFault returns the *fault.Error that answers err. A leaf's sentinel found
// deeper in the chain gives status, message and fields; the whole chain is
// the cause that is logged. A canceled request is a 503.
func asFault(err error) *fault.Error {
	var e *fault.Error
	switch {
	case errors.As(err, &e):
		if e != err && e.Err == nil {
			// A wrapped sentinel: answer with it, log what wrapped it.
			c := *e
			c.Err = err
			return &c
		}
		return e
	case errors.Is(err, context.Canceled):
		return &fault.Error{Status: http.StatusServiceUnavailable, Msg: "request canceled", Err: err}
	}
	return &fault.Error{Status: http.StatusInternalServerError, Msg: "internal error: " + err.Error(), Err: err}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := asFault(err)
	if e.Status >= 500 {
		s.log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "status", e.Status, "err", e)
	}
	msg := e.Msg
	// A 5xx without its cause leaves the caller nothing to act on: it reads
	// the message with its cause, as the log does.
	if e.Status >= 500 {
		msg = e.Error()
	}
	body := map[string]any{"error": msg}
	for k, v := range e.Fields {
		body[k] = v
	}
	writeJSON(w, e.Status, body)
}
