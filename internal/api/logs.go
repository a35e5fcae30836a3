package api

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// LogStreamer reads service logs for GET /api/logs/{name}. Errors wrap
// fs.ErrInvalid for a name that is not a service name and fs.ErrNotExist when
// the service has no log.
type LogStreamer interface {
	// Follow opens name's log: initial is its last bytes; next blocks until
	// more text is written (never a character split in two) or its context
	// ends; stop releases the follower.
	Follow(name string) (initial string, next func(context.Context) (string, error), stop func(), err error)
	// Tail returns the last n lines of name's log, rotated files included.
	Tail(name string, n int) ([]string, error)
}

// maxTailLines bounds ?tail=N.
const maxTailLines = 10000

// logKeepAlive is how long a log stream stays silent before a comment line
// keeps proxies from closing it.
var logKeepAlive = 15 * time.Second

// logs streams a service's log as SSE, or with ?tail=N answers its last N
// lines as JSON.
func (s *Server) logs(w http.ResponseWriter, r *http.Request) error {
	if s.opts.Logs == nil {
		return errNotImplemented
	}
	name := pathParam(r, "name")
	if q := r.URL.Query(); q.Has("tail") {
		n, err := strconv.Atoi(q.Get("tail"))
		if err != nil || n < 1 || n > maxTailLines {
			return fault.New(http.StatusBadRequest, "tail must be an integer from 1 to %d", maxTailLines)
		}
		lines, err := s.opts.Logs.Tail(name, n)
		if err != nil {
			return logError(name, err)
		}
		writeJSON(w, http.StatusOK, apitype.LogLinesResponse{Lines: lines})
		return nil
	}

	end, err := s.openStream(w, r)
	if err != nil {
		return err
	}
	defer end()
	initial, next, stop, err := s.opts.Logs.Follow(name)
	if err != nil {
		return logError(name, err)
	}
	defer stop()
	ctx, cancel := s.streamContext(r)
	defer cancel()
	sse := startSSE(w)
	if initial != "" {
		if err := sse.data(apitype.LogFrame{Type: "initial", Content: initial}); err != nil {
			return nil
		}
	}
	for {
		nctx, ncancel := context.WithTimeout(ctx, logKeepAlive)
		text, err := next(nctx)
		ncancel()
		switch {
		case err == nil:
			err = sse.data(apitype.LogFrame{Type: "append", Content: text})
		case ctx.Err() != nil:
			return nil // client gone or server shutting down
		case errors.Is(err, context.DeadlineExceeded):
			err = sse.comment("keep-alive")
		default:
			s.log.Warn("log stream failed", "service", name, "err", err)
			_ = sse.data(apitype.LogFrame{Type: "error", Message: err.Error()})
			return nil
		}
		if err != nil {
			return nil // the client went away mid-write
		}
	}
}

// logError maps a LogStreamer error to the contract's answers.
func logError(name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrInvalid):
		return &fault.Error{Status: http.StatusBadRequest, Msg: err.Error()}
	case errors.Is(err, fs.ErrNotExist):
		return &fault.Error{Status: http.StatusNotFound, Msg: rules.NoLogs(name), Err: err}
	}
	return err
}
