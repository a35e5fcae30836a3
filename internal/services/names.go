package services

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ErrNotFound is matched (errors.Is) by errors about a service name that was never started.
var ErrNotFound = errors.New("service not found")

// ErrInvalid is matched (errors.Is) by errors about a request the caller must fix.
var ErrInvalid = errors.New("invalid request")

// userError is an error whose message is meant for the caller as is: a
// *fault.Error with the status the API answers it with, matching kind
// (ErrInvalid 400, ErrNotFound 404, ErrConflict 409).
func userError(kind error, msg string) error {
	status := http.StatusBadRequest
	switch kind {
	case ErrNotFound:
		status = http.StatusNotFound
	case ErrConflict:
		status = http.StatusConflict
	}
	return &fault.Error{Status: status, Msg: msg, Kind: kind}
}

func invalidf(format string, args ...any) error {
	return userError(ErrInvalid, fmt.Sprintf(format, args...))
}

func notFound(name string) error {
	return userError(ErrNotFound, rules.ServiceNotFound(name))
}

// MaxNameLen is the longest service name (rules.MaxNameLen).
const MaxNameLen = rules.MaxNameLen

// ValidateName reports why name cannot be a service name: names are
// file-name-safe (letters, digits, '.', '_', '-'), 1 to 64 bytes, and not "." or "..".
// The returned error matches ErrInvalid.
func ValidateName(name string) error {
	if err := rules.ValidateName(name); err != nil {
		return invalidf("%s", err.Error())
	}
	return nil
}
