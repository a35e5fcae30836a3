package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// sseWriteTimeout bounds each frame's write, so a client that keeps its
// connection open but stops reading releases its stream.
var sseWriteTimeout = 30 * time.Second

// sseWriter writes Server-Sent Events frames and flushes each one.
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// startSSE writes the contract's SSE headers and a 200.
func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.deadline()
	_ = s.rc.Flush()
	return s
}

// deadline gives the next write sseWriteTimeout to complete.
func (s *sseWriter) deadline() {
	_ = s.rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
}

// data writes v as one `data: <json>` frame.
func (s *sseWriter) data(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, '\n', '\n')
	s.deadline()
	if _, err := s.w.Write(buf); err != nil {
		return err
	}
	return s.rc.Flush()
}

// comment writes an SSE comment line, used as a keep-alive.
func (s *sseWriter) comment(text string) error {
	s.deadline()
	if _, err := fmt.Fprintf(s.w, ": %s\n\n", text); err != nil {
		return err
	}
	return s.rc.Flush()
}
