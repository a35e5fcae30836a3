package services

import (
	"errors"
	"fmt"
)

// ErrNotFound is matched (errors.Is) by errors about a service name that was never started.
var ErrNotFound = errors.New("service not found")

// ErrInvalid is matched (errors.Is) by errors about a request the caller must fix.
var ErrInvalid = errors.New("invalid request")

// userError is an error whose message is meant for the caller as is.
type userError struct {
	kind error
	msg  string
}

func (e *userError) Error() string        { return e.msg }
func (e *userError) Is(target error) bool { return target == e.kind }

func invalidf(format string, args ...any) error {
	return &userError{kind: ErrInvalid, msg: fmt.Sprintf(format, args...)}
}

func notFound(name string) error {
	return &userError{kind: ErrNotFound, msg: fmt.Sprintf("Service %q not found", name)}
}

// MaxNameLen is the longest service name.
const MaxNameLen = 64

// ValidateName reports why name cannot be a service name: names are
// file-name-safe (letters, digits, '.', '_', '-'), 1 to 64 bytes, and not "." or "..".
// The returned error matches ErrInvalid.
func ValidateName(name string) error {
	switch {
	case name == "":
		return invalidf("service name is empty")
	case len(name) > MaxNameLen:
		return invalidf("service name is %d characters long; the limit is %d", len(name), MaxNameLen)
	case name == "." || name == "..":
		return invalidf("service name %q is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' {
			continue
		}
		return invalidf("service name %q may contain only letters, digits, '.', '_' and '-'", name)
	}
	return nil
}
