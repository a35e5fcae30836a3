package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// ErrStop, returned by a stream callback, ends the stream; the stream method
// then returns nil.
var ErrStop = errors.New("stop stream")

// MaxEventSize bounds one SSE event's data; a larger event ends the stream with an error.
const MaxEventSize = 16 << 20

// EventStream is an open SSE stream; Next returns each event's data.
type EventStream struct {
	body io.ReadCloser
	r    *EventReader
}

// Next returns the data of the next event, io.EOF at the end of the stream.
// The slice is valid until the next call.
func (s *EventStream) Next() ([]byte, error) { return s.r.Next() }

// Close ends the stream; a Next blocked in another goroutine returns an error.
func (s *EventStream) Close() error { return s.body.Close() }

// OpenStream sends GET path and returns the stream once the sidecar has
// answered with a 2xx; only the connection is retried, and no per-request
// timeout applies. Any other status is an *APIError. The caller closes it.
func (c *Client) OpenStream(ctx context.Context, path string) (*EventStream, error) {
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		return nil, readAPIError(resp)
	}
	return &EventStream{body: resp.Body, r: NewEventReader(resp.Body)}, nil
}

// Stream opens an SSE stream at path and calls fn with the data of each event,
// in order, until the server ends the stream, ctx is done, or fn returns an
// error. Only the connection is retried; no per-request timeout applies.
// The end of ctx is returned as ctx.Err().
func (c *Client) Stream(ctx context.Context, path string, fn func(data []byte) error) error {
	s, err := c.OpenStream(ctx, path)
	if err != nil {
		return err
	}
	defer s.Close()
	for {
		data, err := s.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read stream %s: %w", path, err)
		}
		if err := fn(data); err != nil {
			if errors.Is(err, ErrStop) {
				return nil
			}
			return err
		}
	}
}

// Logs follows GET /api/logs/{name}: fn gets each frame's raw JSON and its
// decoded form. A frame that is not a JSON object is passed with a zero LogFrame.
func (c *Client) Logs(ctx context.Context, name string, fn func(raw []byte, f apitype.LogFrame) error) error {
	return c.Stream(ctx, LogsPath(name), func(data []byte) error {
		var f apitype.LogFrame
		_ = json.Unmarshal(data, &f)
		return fn(data, f)
	})
}

// Events follows GET /api/events.
func (c *Client) Events(ctx context.Context, fn func(apitype.Event) error) error {
	return c.Stream(ctx, EventsPath, func(data []byte) error {
		var e apitype.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return fmt.Errorf("decode event: %w", err)
		}
		return fn(e)
	})
}

// EventReader splits a text/event-stream into the data of its events. It
// follows the SSE rules the sidecar uses: "data:" lines (one optional space
// after the colon) joined by newlines, dispatched at a blank line; comments
// and other fields are skipped; LF, CRLF and CR all end a line.
type EventReader struct {
	r    *bufio.Reader
	data []byte
	line []byte
	has  bool
}

// NewEventReader returns an EventReader reading r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the data of the next event. At the end of the input it returns
// io.EOF; an event left without its blank line is dropped, as the SSE spec says.
// The returned slice is valid until the next call.
func (e *EventReader) Next() ([]byte, error) {
	e.data = e.data[:0]
	e.has = false
	for {
		line, err := e.readLine()
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if e.has {
				return e.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		if string(field) != "data" {
			continue
		}
		if e.has {
			e.data = append(e.data, '\n')
		}
		if len(e.data)+len(value) > MaxEventSize {
			return nil, fmt.Errorf("event larger than %d bytes", MaxEventSize)
		}
		e.data = append(e.data, value...)
		e.has = true
	}
}

// readLine returns the next line without its terminator.
func (e *EventReader) readLine() ([]byte, error) {
	e.line = e.line[:0]
	for {
		b, err := e.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) && len(e.line) > 0 {
				// A last line without terminator ends no event; report EOF next.
				return e.line, nil
			}
			return nil, err
		}
		switch b {
		case '\n':
			return e.line, nil
		case '\r':
			if nb, err := e.r.Peek(1); err == nil && nb[0] == '\n' {
				_, _ = e.r.ReadByte()
			}
			return e.line, nil
		}
		if len(e.line) > MaxEventSize {
			return nil, fmt.Errorf("line longer than %d bytes", MaxEventSize)
		}
		e.line = append(e.line, b)
	}
}
