package api

import (
	"crypto/subtle"
	"net/http"
	"strings"
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
