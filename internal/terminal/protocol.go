package terminal

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// SubprotocolV2 is the WebSocket subprotocol that selects protocol v2. A
// client that asks for no subprotocol speaks v1.
const SubprotocolV2 = "proliferate-terminal.v2"

// Frame types of protocol v2: the first byte of every binary message. Client
// frames have the high bit clear, server frames have it set.
const (
	FrameInit   byte = 0x01 // client: cols u16, rows u16, offset u64, session id
	FrameInput  byte = 0x02 // client: offset u64, bytes for the PTY
	FrameResize byte = 0x03 // client: cols u16, rows u16
	FrameReady  byte = 0x81 // server: flags u8, pid u32, start u64, live u64
	FrameOutput byte = 0x82 // server: offset u64, output bytes
	FrameExit   byte = 0x83 // server: exit code i32
)

// ReadyResumed is the FrameReady flag set when the init attached to a session
// that already existed.
const ReadyResumed byte = 1

// Close codes and reasons sent to clients.
const (
	// ExitReasonPrefix starts the close reason of a v2 connection whose shell
	// exited: "exit:<code>", with close code 1000.
	ExitReasonPrefix = "exit:"
	// V1ExitReason is the close reason of a v1 connection whose shell exited.
	V1ExitReason = "PTY exited"
)

const (
	closeNormal        = 1000
	closeGoingAway     = 1001
	closeProtocolError = 1002
	closeUnsupported   = 1003
	closeInternalError = 1011
	closeTryAgainLater = 1013
)

// MaxMessage is the largest message a client may send: a 1 MiB paste plus
// the frame header and some slack.
const MaxMessage = 1<<20 + 64<<10

// Init is the first frame of a v2 connection.
type Init struct {
	// Session is the client-chosen id: 1–64 of [A-Za-z0-9._-].
	Session string
	Cols    uint16
	Rows    uint16
	// Offset is the output offset the client already has; replay starts there
	// (or at the oldest byte still kept, if that is later).
	Offset uint64
}

const initHeader = 1 + 2 + 2 + 8

// ParseInit parses a FrameInit message.
func ParseInit(p []byte) (Init, error) {
	if len(p) < initHeader+1 || p[0] != FrameInit {
		return Init{}, errors.New("parse init frame: too short or wrong type")
	}
	in := Init{
		Cols:    binary.BigEndian.Uint16(p[1:]),
		Rows:    binary.BigEndian.Uint16(p[3:]),
		Offset:  binary.BigEndian.Uint64(p[5:]),
		Session: string(p[initHeader:]),
	}
	if len(in.Session) > 64 {
		return Init{}, errors.New("parse init frame: session id longer than 64 bytes")
	}
	if !validID(in.Session) {
		return Init{}, fmt.Errorf("parse init frame: session id %q has characters outside A-Z a-z 0-9 . _ -", in.Session)
	}
	if in.Cols == 0 || in.Rows == 0 {
		return Init{}, errors.New("parse init frame: cols and rows must be at least 1")
	}
	return in, nil
}

// AppendInit appends the encoding of in to b.
func AppendInit(b []byte, in Init) []byte {
	b = append(b, FrameInit)
	b = binary.BigEndian.AppendUint16(b, in.Cols)
	b = binary.BigEndian.AppendUint16(b, in.Rows)
	b = binary.BigEndian.AppendUint64(b, in.Offset)
	return append(b, in.Session...)
}

// AppendInput appends an input frame: data typed after the client had
// processed offset bytes of output.
func AppendInput(b []byte, offset uint64, data []byte) []byte {
	b = append(b, FrameInput)
	b = binary.BigEndian.AppendUint64(b, offset)
	return append(b, data...)
}

// AppendResize appends a resize frame.
func AppendResize(b []byte, cols, rows uint16) []byte {
	b = append(b, FrameResize)
	b = binary.BigEndian.AppendUint16(b, cols)
	return binary.BigEndian.AppendUint16(b, rows)
}

func validID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// clientFrame is a parsed client frame after init.
type clientFrame struct {
	typ        byte
	offset     uint64
	data       []byte
	cols, rows uint16
}

// parseClientFrame parses an input or resize frame. Unknown types are
// returned with typ set and no error, so newer clients can add frames.
func parseClientFrame(p []byte) (clientFrame, error) {
	if len(p) == 0 {
		return clientFrame{}, errors.New("empty frame")
	}
	f := clientFrame{typ: p[0]}
	switch p[0] {
	case FrameInput:
		if len(p) < 9 {
			return f, errors.New("input frame: too short")
		}
		f.offset = binary.BigEndian.Uint64(p[1:])
		f.data = p[9:]
	case FrameResize:
		if len(p) != 5 {
			return f, errors.New("resize frame: want 5 bytes")
		}
		f.cols = binary.BigEndian.Uint16(p[1:])
		f.rows = binary.BigEndian.Uint16(p[3:])
		if f.cols == 0 || f.rows == 0 {
			return f, errors.New("resize frame: cols and rows must be at least 1")
		}
	case FrameInit:
		return f, errors.New("init frame after init")
	}
	return f, nil
}

// v1Resize parses a v1 text frame that is a resize request:
// {"type":"resize","cols":C,"rows":R} with numeric cols and rows. Anything
// else is keystrokes.
func v1Resize(p []byte) (cols, rows uint16, ok bool) {
	if len(p) > 256 || len(p) < 2 || p[0] != '{' {
		return 0, 0, false
	}
	var m struct {
		Type string   `json:"type"`
		Cols *float64 `json:"cols"`
		Rows *float64 `json:"rows"`
	}
	if json.Unmarshal(p, &m) != nil || m.Type != "resize" || m.Cols == nil || m.Rows == nil {
		return 0, 0, false
	}
	return clampSize(*m.Cols), clampSize(*m.Rows), true
}

func clampSize(f float64) uint16 {
	switch {
	case !(f >= 1): // also NaN
		return 1
	case f > 65535:
		return 65535
	}
	return uint16(f)
}

// closeReason fits s into a close frame (at most 123 bytes).
func closeReason(s string) string {
	if len(s) <= 120 {
		return s
	}
	return strings.ToValidUTF8(s[:120], "")
}
