// Package statefile is the sidecar's state file, <StateDir>/state.json, as a
// document with two owners: the service manager (internal/services) keeps
// "services" in it and exposure (internal/expose, and the MCP server's direct
// mode) keeps "exposedPort". Whoever changes it takes Lock, reads the file
// again, changes only its own key, keeps the other's as it found it, and
// replaces the file whole (rules/atomicfile), so the two never lose each
// other's updates, in one process or in several sharing the state dir.
package statefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Perm is the state file's mode: services' env (echoed options) may hold secrets.
const Perm = 0o600

// Path is the state file of the state dir dir.
func Path(dir string) string { return filepath.Join(dir, rules.StateFileName) }

// Lock takes the exclusive lock on <dir>/state.lock that every process
// sharing the state dir takes to change the state file; unlock releases it.
// The error matches os.ErrNotExist when dir is gone.
func Lock(dir string) (unlock func(), err error) {
	f, err := lockedfile.OpenFile(filepath.Join(dir, rules.StateLockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock state: %w", err)
	}
	return func() { _ = f.Close() }, nil
}

// ErrUnusable marks a state file that exists but cannot be read as the state
// (not a regular file, not JSON, unreadable); the service manager moves such
// a file aside.
var ErrUnusable = errors.New("state file is unusable")

// Read returns the bytes of the state file at path, nil when there is none.
// A FIFO or directory planted as the state file never hangs the reader: it is
// an error matching ErrUnusable.
func Read(path string) ([]byte, os.FileInfo, error) {
	// O_NONBLOCK: a FIFO planted as state.json must not hang the sidecar.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w: %w", path, ErrUnusable, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fi, fmt.Errorf("%s is a %v, not a regular file: %w", path, fi.Mode().Type(), ErrUnusable)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, fi, fmt.Errorf("read %s: %w: %w", path, ErrUnusable, err)
	}
	return raw, fi, nil
}

// Encode is the content of the state file for doc: two-space indented JSON
// and a newline, as the contract specifies.
func Encode(doc any) ([]byte, error) {
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Write replaces the state file at path with b, atomically (readers see the
// old or the new content, never half).
func Write(path string, b []byte) error { return atomicfile.WriteFile(path, b, Perm) }

// exposure is the state file as exposure reads and writes it: its own key,
// and the services kept as they are.
type exposure struct {
	Services    json.RawMessage `json:"services"`
	ExposedPort *int            `json:"exposedPort"`
}

// ExposedPort is the exposed port kept in the state file of the state dir Dir,
// so that it survives a restart of the sidecar.
type ExposedPort struct{ Dir string }

// Load returns the recorded port, nil when none is. A recorded value outside
// 1-65535 was not written by a sidecar and reads as none.
func (p ExposedPort) Load() (*int, error) {
	raw, _, err := Read(Path(p.Dir))
	if err != nil || raw == nil {
		return nil, err
	}
	var doc exposure
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
		return nil, fmt.Errorf("decode %s: %w: %w", Path(p.Dir), ErrUnusable, err)
	}
	if doc.ExposedPort != nil && (*doc.ExposedPort < 1 || *doc.ExposedPort > 65535) {
		return nil, nil
	}
	return doc.ExposedPort, nil
}

// Save records port, keeping the services as they are in the file.
func (p ExposedPort) Save(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("exposed port %d is outside 1-65535", port)
	}
	unlock, err := Lock(p.Dir)
	if err != nil {
		return err
	}
	defer unlock()
	path := Path(p.Dir)
	raw, _, err := Read(path)
	if err != nil {
		return err
	}
	var doc exposure
	if raw != nil {
		if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&doc); err != nil {
			return fmt.Errorf("decode %s: %w: %w", path, ErrUnusable, err)
		}
	}
	if len(doc.Services) == 0 || string(doc.Services) == "null" {
		doc.Services = json.RawMessage("{}")
	}
	doc.ExposedPort = &port
	b, err := Encode(doc)
	if err != nil {
		return err
	}
	return Write(path, b)
}
