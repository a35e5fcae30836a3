package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
)

// decode reads r's JSON body into v. Every failure is a 400 with a JSON body.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return fault.New(http.StatusBadRequest, "Content-Type must be application/json")
		}
	}
	limit := bodyLimit(r, s.opts.MaxBodyBytes)
	if r.ContentLength > limit {
		// Refused unread: the server closes the connection instead of reading it.
		return fault.New(http.StatusBadRequest, "request body too large (limit %d bytes)", limit)
	}
	// gate has put r.Body under the cap.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fault.New(http.StatusBadRequest, "request body too large (limit %d bytes)", mbe.Limit)
		}
		return fault.New(http.StatusBadRequest, "read request body: %v", err)
	}
	return decodeJSON(body, v)
}

// decodeJSON parses exactly one JSON value from body into v.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return fault.New(http.StatusBadRequest, "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return fault.New(http.StatusBadRequest, "invalid JSON: field %q must be %s", ute.Field, ute.Type.String())
		}
		return fault.New(http.StatusBadRequest, "invalid JSON: %v", err)
	}
	if dec.More() {
		return fault.New(http.StatusBadRequest, "invalid JSON: trailing data after the object")
	}
	return nil
}

// writeJSON writes v as the JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshalJSON(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"internal server error"}` + "\n")
	}
	writeJSONBody(w, status, b)
}

// marshalJSON encodes v as a response body: JSON ending in a newline.
func marshalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// jsonContentType is shared by every response; net/http never modifies header values.
var jsonContentType = []string{"application/json"}

// writeJSONBody writes body, from marshalJSON, with status; the one place that
// sets Content-Type for JSON. body is only read, so it may be shared.
func writeJSONBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h["Content-Type"] = jsonContentType
	// With a length, net/http need not chunk bodies over 2 KiB.
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
