package rules

import (
	"errors"
	"fmt"
)

// MaxNameLen is the longest service name, in bytes. Names become file names
// (<state>/logs/<name>.log), so the limit is in bytes, not characters.
const MaxNameLen = 64

// ErrInvalidName is matched (errors.Is) by every error ValidateName returns.
var ErrInvalidName = errors.New("invalid service name")

type nameError struct{ msg string }

func (e *nameError) Error() string        { return e.msg }
func (e *nameError) Is(target error) bool { return target == ErrInvalidName }

// ValidateName reports why name cannot be a service name, or nil. A name is 1
// to MaxNameLen bytes of letters, digits, '.', '_' and '-', and not "." or
// "..". The message is meant for the caller as is.
func ValidateName(name string) error {
	switch {
	case name == "":
		return &nameError{"service name is empty"}
	case len(name) > MaxNameLen:
		return &nameError{fmt.Sprintf("service name is %d characters long; the limit is %d", len(name), MaxNameLen)}
	case name == "." || name == "..":
		return &nameError{fmt.Sprintf("service name %q is not allowed", name)}
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return &nameError{fmt.Sprintf("service name %q may contain only letters, digits, '.', '_' and '-'", name)}
		}
	}
	return nil
}

// ValidName reports whether ValidateName accepts name.
func ValidName(name string) bool { return ValidateName(name) == nil }

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ServiceNotFound is the contract's message for a service name that was never
// started (404 on the API, exit 1 in the CLI, a tool error in MCP mode).
func ServiceNotFound(name string) string { return fmt.Sprintf("Service %q not found", name) }

// NoLogs is the contract's message for a service that has no log file.
func NoLogs(name string) string { return fmt.Sprintf("No logs found for service %q", name) }

// MaxVolumeNameLen is the longest volume name, in bytes.
const MaxVolumeNameLen = 63

// ValidateVolumeName reports why name cannot name a volume, or nil: 1 to
// MaxVolumeNameLen letters, digits, '.', '_' and '-', starting with a letter or digit
// (names become directory names on the engine's host).
func ValidateVolumeName(name string) error {
	switch {
	case name == "":
		return errors.New("volume name is empty")
	case len(name) > MaxVolumeNameLen:
		return fmt.Errorf("volume name is %d characters long; the limit is %d", len(name), MaxVolumeNameLen)
	case !(name[0] >= 'a' && name[0] <= 'z' || name[0] >= 'A' && name[0] <= 'Z' || name[0] >= '0' && name[0] <= '9'):
		return fmt.Errorf("volume name %q must start with a letter or digit", name)
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return fmt.Errorf("volume name %q may contain only letters, digits, '.', '_' and '-'", name)
		}
	}
	return nil
}
