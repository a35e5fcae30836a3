package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Streams (SSE and the terminal WebSocket) live as long as their client, so
// they are the one way an authenticated client can hold a connection for
// good. openStream admits them only in a shape whose end the server sees:
//
//   - GET only. A HEAD response writes nothing to the connection, so a
//     client that left was never noticed and its stream stayed open forever
//     (issue 28: 140 of them filled the connection cap). HEAD is 405.
//   - No request body. While a body is unread, net/http does not run its
//     background read, so the request's context never learns that the peer
//     closed. A body is 400, and the connection is closed after the answer.
//   - Within their share of the connection cap (rules.StreamConnsPercent),
//     so health checks and short requests always find a connection. Past it,
//     503.
//
// Every write of a stream also has a deadline (sseWriteTimeout; the
// terminal's WriteTimeout and pings), so a peer that vanished without a FIN
// is found at the next keep-alive.

// streamLimit is how many streams may be open at once: the share of the
// connection cap, leaving at least rules.MinFreeConns; 0 means no limit
// (a Server not behind HTTPServer's listener).
func (s *Server) streamLimit() int {
	cl := s.conns.Load()
	if cl == nil {
		return 0
	}
	limit := cl.limit()
	return max(1, min(limit*rules.StreamConnsPercent/100, limit-rules.MinFreeConns))
}

// openStream admits r as a stream or says why not. On success the stream is
// counted (GET /api/debug/stats) and its read deadline lifted until end is
// called.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) (end func(), err error) {
	if r.ContentLength != 0 {
		closeUnread(w)
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		return nil, fault.New(http.StatusMethodNotAllowed, "%s is a stream: only GET opens it", r.URL.Path)
	}
	if r.ContentLength != 0 {
		return nil, fault.New(http.StatusBadRequest, "GET %s takes no request body", r.URL.Path)
	}
	n := s.streams.Add(1)
	if limit := s.streamLimit(); limit > 0 && n > int64(limit) {
		s.streams.Add(-1)
		w.Header().Set("Retry-After", "5")
		return nil, &fault.Error{Status: http.StatusServiceUnavailable,
			Msg: fmt.Sprintf("too many open streams: the limit is %d; close a stream (events, logs, terminal) and retry", limit)}
	}
	liftReadDeadline(w)
	return func() { s.streams.Add(-1) }, nil
}

// closeUnread makes the server close the connection after the answer instead
// of reading a body the handler refused; a body the client already sent gets
// unauthBodyGrace to arrive, so the client reads the answer, not a reset.
func closeUnread(w http.ResponseWriter) {
	w.Header()["Connection"] = closeHeader
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(unauthBodyGrace))
}
