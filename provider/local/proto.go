package local

// The control channel between the engine and a sandbox's init: a unix socket in the
// sandbox's directory. A connection carries one request (a JSON line), then frames in
// both directions: a type byte, a big-endian uint32 length and the payload.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Frame types.
const (
	frameStdin    = 'i' // engine → init: stdin bytes
	frameStdinEOF = 'e' // engine → init: stdin is done
	frameResize   = 'z' // engine → init: cols u16, rows u16 (TTY)
	frameStdout   = 'o' // init → engine
	frameStderr   = 'r' // init → engine
	frameExit     = 'x' // init → engine: an exitFrame, the last frame
)

// maxFrame bounds a frame's payload; larger writes are split.
const maxFrame = 64 << 10

// ctlRequest is the first line of a control connection.
type ctlRequest struct {
	Op        string   `json:"op"` // "exec" | "ping"
	Argv      []string `json:"argv,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	Env       []string `json:"env,omitempty"`
	TimeoutMs int64    `json:"timeoutMs,omitempty"`
	// Detach starts the command with /dev/null as its streams and answers at once; the
	// command outlives the connection.
	Detach bool `json:"detach,omitempty"`
	// Stdin says the engine will send stdin frames; otherwise stdin is /dev/null.
	Stdin bool `json:"stdin,omitempty"`
	// TTY runs the command on a new pseudo-terminal of Cols x Rows.
	TTY  bool   `json:"tty,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
}

// exitFrame ends a connection.
type exitFrame struct {
	Code     int    `json:"code"`
	TimedOut bool   `json:"timedOut,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	Error    string `json:"error,omitempty"` // the command could not start
}

// frameWriter writes frames; safe for concurrent use.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) write(typ byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		n := min(len(p), maxFrame)
		var hdr [5]byte
		hdr[0] = typ
		binary.BigEndian.PutUint32(hdr[1:], uint32(n))
		if _, err := f.w.Write(hdr[:]); err != nil {
			return err
		}
		if _, err := f.w.Write(p[:n]); err != nil {
			return err
		}
		p = p[n:]
		if len(p) == 0 {
			return nil
		}
	}
}

// streamWriter is an io.Writer that sends its bytes as frames of one type.
type streamWriter struct {
	f   *frameWriter
	typ byte
}

func (s streamWriter) Write(p []byte) (int, error) {
	if err := s.f.write(s.typ, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readFrame reads one frame; the payload is valid until the next call.
func readFrame(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes is too large", n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	return hdr[0], buf, nil
}

func writeRequest(w io.Writer, req ctlRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

func readRequest(r *bufio.Reader) (ctlRequest, error) {
	var req ctlRequest
	line, err := r.ReadBytes('\n')
	if err != nil {
		return req, err
	}
	if len(line) > 1<<20 {
		return req, errors.New("request too large")
	}
	err = json.Unmarshal(line, &req)
	return req, err
}
