package e2bwire

// The Connect protocol (connectrpc.com/docs/protocol) as envd speaks it with the JSON
// codec: unary calls are a plain JSON POST; server-streaming calls put every message
// in an envelope (one flag byte, a 4-byte big-endian length, the JSON) and end with an
// end-of-stream envelope that carries the error, if any. The client and the local
// server share this file so both sides frame the same way.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// Connect content types and headers.
const (
	ContentTypeJSON        = "application/json"
	ContentTypeConnectJSON = "application/connect+json"
	HeaderProtocolVersion  = "Connect-Protocol-Version"
	HeaderTimeoutMs        = "Connect-Timeout-Ms"
)

// Envelope flags.
const (
	FlagCompressed byte = 0x01
	FlagEndStream  byte = 0x02
)

// MaxEnvelope bounds one enveloped message; envd's messages are small (output chunks
// are 32 KiB at most), so anything larger is a broken or hostile peer.
const MaxEnvelope = 4 << 20

// Envelope is one framed message of a streaming call.
type Envelope struct {
	Flags byte
	Data  []byte
}

// ErrEnvelopeTooLarge is returned for an envelope longer than MaxEnvelope.
var ErrEnvelopeTooLarge = errors.New("connect envelope too large")

// ReadEnvelope reads one envelope. io.EOF means the stream ended cleanly between
// envelopes; a stream that ends inside one is io.ErrUnexpectedEOF.
func ReadEnvelope(r io.Reader) (Envelope, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Envelope{}, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxEnvelope {
		return Envelope{}, fmt.Errorf("%w: %d bytes", ErrEnvelopeTooLarge, n)
	}
	e := Envelope{Flags: hdr[0], Data: make([]byte, n)}
	if _, err := io.ReadFull(r, e.Data); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Envelope{}, err
	}
	if e.Flags&FlagCompressed != 0 {
		return Envelope{}, errors.New("compressed connect envelope: no compression was negotiated")
	}
	return e, nil
}

// WriteEnvelope writes one envelope.
func WriteEnvelope(w io.Writer, flags byte, data []byte) error {
	if len(data) > MaxEnvelope {
		return fmt.Errorf("%w: %d bytes", ErrEnvelopeTooLarge, len(data))
	}
	buf := make([]byte, 5+len(data))
	buf[0] = flags
	binary.BigEndian.PutUint32(buf[1:], uint32(len(data)))
	copy(buf[5:], data)
	_, err := w.Write(buf)
	return err
}

// Connect error codes used here.
const (
	CodeCanceled           = "canceled"
	CodeUnknown            = "unknown"
	CodeInvalidArgument    = "invalid_argument"
	CodeDeadlineExceeded   = "deadline_exceeded"
	CodeNotFound           = "not_found"
	CodeAlreadyExists      = "already_exists"
	CodePermissionDenied   = "permission_denied"
	CodeFailedPrecondition = "failed_precondition"
	CodeUnimplemented      = "unimplemented"
	CodeInternal           = "internal"
	CodeUnavailable        = "unavailable"
	CodeUnauthenticated    = "unauthenticated"
)

// ConnectError is the error of a Connect call: the JSON body of a failed unary call,
// or the "error" of an end-of-stream envelope.
type ConnectError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

func (e *ConnectError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// HTTPStatus is the status a unary error is sent with.
func (e *ConnectError) HTTPStatus() int {
	switch e.Code {
	case CodeCanceled:
		return 499
	case CodeInvalidArgument, CodeFailedPrecondition:
		return http.StatusBadRequest
	case CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case CodeNotFound:
		return http.StatusNotFound
	case CodeAlreadyExists:
		return http.StatusConflict
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeUnimplemented:
		return http.StatusNotImplemented
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	}
	return http.StatusInternalServerError
}

// CodeForHTTPStatus is the code of a unary response that failed without a Connect
// error body (a proxy's error page, say).
func CodeForHTTPStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return CodeInvalidArgument
	case http.StatusUnauthorized:
		return CodeUnauthenticated
	case http.StatusForbidden:
		return CodePermissionDenied
	case http.StatusNotFound:
		return CodeNotFound
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return CodeUnavailable
	}
	return CodeUnknown
}

// EndStream is the JSON of an end-of-stream envelope.
type EndStream struct {
	Error    *ConnectError       `json:"error,omitempty"`
	Metadata map[string][]string `json:"metadata,omitempty"`
}

// ParseEndStream decodes an end-of-stream envelope's JSON; the error it carries, if
// any, is returned as a *ConnectError.
func ParseEndStream(data []byte) error {
	var es EndStream
	if len(data) > 0 {
		if err := json.Unmarshal(data, &es); err != nil {
			return fmt.Errorf("decode connect end of stream: %w", err)
		}
	}
	if es.Error != nil {
		if es.Error.Code == "" {
			es.Error.Code = CodeUnknown
		}
		return es.Error
	}
	return nil
}
