package api

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

// The CORS header values, shared by every response (net/http never modifies
// header values) so setting them allocates nothing.
var (
	corsOrigin  = []string{"*"}
	corsMethods = []string{"GET, POST, DELETE, OPTIONS"}
	corsHeaders = []string{"Content-Type, Authorization"}
)

// cors sets the contract's CORS headers on every response and answers any OPTIONS with 200.
func cors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Access-Control-Allow-Origin"] = corsOrigin
		h["Access-Control-Allow-Methods"] = corsMethods
		h["Access-Control-Allow-Headers"] = corsHeaders
		if r.Method == http.MethodOptions {
			w.WriteHeader(http.StatusOK)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries "Authorization: Bearer <token>". An empty
// token authorizes nobody.
func authorized(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// unauthBodyGrace is how long the server may go on reading the body of a
// request that was refused from its headers alone: long enough to take in a
// body the client already sent (so closing the connection does not reset it
// before the answer is read), too short for a client that never sends it to
// hold the connection.
const unauthBodyGrace = 100 * time.Millisecond

// closeHeader is the Connection value of answers after which the server closes.
var closeHeader = []string{"close"}

// gate runs first on every request. Authentication is decided from the headers
// alone: a request that carries a body but no valid token is answered without
// its body ever being read (no route reachable without a token reads one),
// and its connection is closed after the answer instead of waiting up to the
// read timeout for a body that may never come. An authorized request's body
// is capped at Options.MaxBodyBytes (allowBody raises it per route), and its
// connection counts as authenticated for the connection limiter.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := authorized(r, s.opts.Token)
		if ok {
			if c := limitedConnFrom(r.Context()); c != nil {
				c.markAuthenticated()
			}
		}
		if r.Body != nil && r.Body != http.NoBody {
			if !ok {
				w.Header()["Connection"] = closeHeader
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(unauthBodyGrace))
			} else {
				r.Body = newCappedBody(w, r.Body, s.opts.MaxBodyBytes)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// liftReadDeadline removes the server's whole-request read deadline
// (http.Server.ReadTimeout) from a streaming response (SSE, WebSocket), which
// lives as long as the client wants. Only handlers behind requireAuth call it:
// an unauthenticated connection never gets past the deadline.
func liftReadDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
}

// requireAuth answers 401 {"error":"Unauthorized"} unless the request is authorized.
func (s *Server) requireAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r, s.opts.Token) {
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "Unauthorized"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverer turns a handler panic into a logged JSON 500 so bad input never takes the sidecar down.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", v)
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal server error"})
			}
		}()
		next.ServeHTTP(w, r)
	})
}
