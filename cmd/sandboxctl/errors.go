package main

// Errors as the user reads them: said once, with what to do next.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// hintError is an error whose message is written for the user (what failed
// and what to do next) while errors.Is still finds the cause.
type hintError struct {
	msg   string
	cause error
}

func (e hintError) Error() string { return e.msg }
func (e hintError) Unwrap() error { return e.cause }

// notIsolated explains engine.ErrNotIsolated: the local engine isolates
// sandboxes with namespaces, which this user may not create here. Running as
// root is the way on; --unisolated is named only with what it gives up.
func notIsolated(err error) error {
	return hintError{cause: err, msg: err.Error() + "\n" +
		"run sandboxctl as root (sudo -E sandboxctl …) so the local engine can isolate sandboxes;\n" +
		"--unisolated runs them as plain host processes with no isolation at all, for trusted code only"}
}

// imageError is err about the image ref, said once: the store's errors
// already name the image, and one missing from the store gets the next step.
func imageError(ref string, err error) error {
	if errors.Is(err, engine.ErrNotFound) {
		return hintError{cause: err, msg: fmt.Sprintf("image %q is not in the local image store: "+
			"`sandboxctl image list` shows what is; image build, pull or import adds one", ref)}
	}
	if strings.Contains(err.Error(), ref) {
		return err
	}
	return fmt.Errorf("image %q: %w", ref, err)
}

// errorText is the message run prints for err: a part that a wrapping layer
// repeated right after itself ("image \"x\": image \"x\": not found") is
// said once.
func errorText(err error) string {
	lines := strings.Split(err.Error(), "\n")
	for i, line := range lines {
		parts := strings.Split(line, ": ")
		out := parts[:1]
		for _, p := range parts[1:] {
			if p != out[len(out)-1] {
				out = append(out, p)
			}
		}
		lines[i] = strings.Join(out, ": ")
	}
	return strings.Join(lines, "\n")
}
