package api

import (
	"io"
	"net/http"
	"time"
)

// cappedBody is a request body under the server's size cap (Options.MaxBodyBytes),
// applied to every request in one place (gate). A route that takes larger
// bodies raises the cap for its own requests with allowBody; nothing else
// needs to remember the limit.
type cappedBody struct {
	orig  io.ReadCloser
	w     http.ResponseWriter
	limit int64
	// r is orig behind http.MaxBytesReader, built on the first Read so a
	// route can still raise the limit before anything was read.
	r io.ReadCloser
}

func newCappedBody(w http.ResponseWriter, body io.ReadCloser, limit int64) *cappedBody {
	return &cappedBody{orig: body, w: w, limit: limit}
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.r == nil {
		// MaxBytesReader also tells the server to close the connection
		// after the answer when the cap is hit, so the rest is never read.
		b.r = http.MaxBytesReader(b.w, b.orig, b.limit)
	}
	return b.r.Read(p)
}

func (b *cappedBody) Close() error { return b.orig.Close() }

// bodyLimit is the cap of r's body: the server's, or what the route raised it to.
func bodyLimit(r *http.Request, def int64) int64 {
	if b, ok := r.Body.(*cappedBody); ok {
		return b.limit
	}
	return def
}

// allowBody raises the body cap of one route to limit bytes and gives the
// request readTimeout from now to arrive in full, in place of the server's
// ReadTimeout (POST /api/git/bundle takes repository bundles far larger than
// any JSON request, over links that may be slow). Register it with
// r.With(s.allowBody(n, d)) behind requireAuth; it must run before the
// handler reads the body.
func (s *Server) allowBody(limit int64, readTimeout time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if b, ok := r.Body.(*cappedBody); ok && b.r == nil {
				b.limit = limit
			}
			if readTimeout > 0 {
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(readTimeout))
			}
			next.ServeHTTP(w, r)
		})
	}
}
