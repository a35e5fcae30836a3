package api

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"
)

// pathParam returns the URL parameter key decoded. chi matches the escaped
// path when it has escapes of its own (%2F, %2E…) and hands those back raw;
// callers get the name the client meant, as the old sidecar did.
func pathParam(r *http.Request, key string) string {
	v := chi.URLParam(r, key)
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}
