package e2bserver

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// apiError is an error with the status and message the client sees; the cause is
// logged only.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func errNotFound(id string) error {
	return &apiError{http.StatusNotFound, "sandbox " + id + " not found"}
}

func errConflict(msg string) error { return &apiError{http.StatusConflict, msg} }

func errBadRequest(format string, a ...any) error {
	return &apiError{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}

// maxJSON bounds a control-plane or envd JSON request body.
const maxJSON = 1 << 20

// decode reads a JSON body into v; an empty body leaves v as it is.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxJSON))
	if err != nil {
		return errBadRequest("read body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return errBadRequest("invalid JSON body: %v", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"code":500,"message":"encode response"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// handle adapts a handler that returns an error into E2B's {code, message} answer.
func (s *Server) handle(h func(w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		status, msg := s.classify(err)
		if status >= 500 {
			s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		writeJSON(w, status, e2bwire.APIError{Code: status, Message: msg})
	}
}

// classify maps an error to a status and a client message.
func (s *Server) classify(err error) (int, string) {
	var ae *apiError
	var fe *fsError
	switch {
	case errors.As(err, &ae):
		return ae.status, ae.msg
	case errors.As(err, &fe):
		return fe.status(), fe.msg
	case errors.Is(err, engine.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, engine.ErrNameTaken), errors.Is(err, engine.ErrInUse), errors.Is(err, engine.ErrNotEmpty):
		return http.StatusConflict, err.Error()
	case errors.Is(err, engine.ErrIsDir), errors.Is(err, engine.ErrNotDir):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, engine.ErrLimit):
		// A limit this machine cannot apply: the request is refused, not the server broken.
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, engine.ErrUnsupported):
		return http.StatusNotImplemented, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, err.Error()
	}
	return http.StatusInternalServerError, "internal error"
}

// authAPI checks X-API-Key in constant time.
func (s *Server) authAPI(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-API-Key")
		if subtle.ConstantTimeCompare([]byte(key), []byte(s.o.APIKey)) != 1 {
			writeJSON(w, http.StatusUnauthorized, e2bwire.APIError{Code: 401, Message: "Invalid API key"})
			return
		}
		next(w, r)
	}
}
