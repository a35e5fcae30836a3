// Package fault is the error a sidecar leaf (internal/services, gitrepo,
// terminal, expose) returns for a failure its caller caused or can act on.
// It carries the HTTP status and the message the API (internal/api) answers
// with, so the API writes any *Error it finds as it is and knows none of the
// leaves' sentinel errors; the MCP server and the CLI show its message.
package fault

import (
	"fmt"
	"strings"
)

// Error is a failure with the HTTP status it is answered with and a message
// safe to show the caller. A leaf may declare one as a sentinel and wrap it
// (fmt.Errorf("%w: ...")): the API then answers with the sentinel's status
// and message and logs the whole chain.
type Error struct {
	// Status is the HTTP status, 4xx for what the caller must fix, 5xx for
	// what failed on our side.
	Status int
	// Msg is what the caller reads.
	Msg string
	// Fields are merged into the JSON body next to "error" (e.g. "field").
	Fields map[string]any
	// Err is the cause. It is logged; it is shown after Msg only with a 5xx
	// status, so that a server-side failure always says what failed.
	Err error
	// Kind is a sentinel that errors.Is matches (e.g. services.ErrInvalid),
	// so a leaf's callers keep testing for it; it is not part of the message.
	Kind error
}

// New returns an *Error with status and a formatted message.
func New(status int, format string, args ...any) *Error {
	return &Error{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// Error is the message, then the cause unless the message already says it,
// so a logged line carries the cause once.
func (e *Error) Error() string {
	if e.Err != nil && !strings.Contains(e.Msg, e.Err.Error()) {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is e's Kind.
func (e *Error) Is(target error) bool { return e.Kind != nil && target == e.Kind }
