// Package state is the one record the local engine keeps of each sandbox:
// <data dir>/sandboxes/<id>/state.json, written whole (temp file, fsync, rename) by
// the engine, and read back by any engine of the data dir, so a sandbox outlives the
// process that created it. Package local, the engine, is its one importer; it holds
// the records in memory and decides when to write them.
//
// Beside it, the sandbox's shim (or an unisolated init) writes init's exit code to
// ExitFile once it has reaped init: a file of its own, because those processes never
// write the engine's record, which the engine may be rewriting at that moment.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// File is the record's name in the sandbox directory.
const File = "state.json"

// ExitFile holds init's exit code, in decimal, once init has been reaped.
const ExitFile = "exit"

// Record is a sandbox's state.
type Record struct {
	ID       string      `json:"id"`
	Name     string      `json:"name,omitempty"`
	Created  time.Time   `json:"created"`
	Spec     engine.Spec `json:"spec"`
	Isolated bool        `json:"isolated"`
	NetNS    bool        `json:"netns"`
	Pid      int         `json:"pid"`      // init, on the host
	PidStart uint64      `json:"pidStart"` // its start time, against pid reuse
	PidNS    string      `json:"pidNs,omitempty"`
	// ShimPid is the sandbox's host-side shim (none for an unisolated sandbox), and
	// ShimStart its start time.
	ShimPid   int             `json:"shimPid,omitempty"`
	ShimStart uint64          `json:"shimStart,omitempty"`
	Tunnels   []engine.Tunnel `json:"tunnels,omitempty"`
	Applied   engine.Limits   `json:"applied,omitempty"`
	Want      engine.Limits   `json:"want,omitempty"` // the spec's limits with the defaults
	Cgroups   []string        `json:"cgroups,omitempty"`
	Paused    bool            `json:"paused,omitempty"`
	Dead      bool            `json:"dead,omitempty"`
	ExitCode  *int            `json:"exitCode,omitempty"`
	// Image is the image the sandbox booted from (its layers are the overlay's).
	Image   *engine.RootFS `json:"image,omitempty"`
	Runtime string         `json:"runtime,omitempty"`
	// SecretEnv are the secrets' NAME=placeholder entries (never their values), for
	// every exec's environment.
	SecretEnv []string `json:"secretEnv,omitempty"`
}

// Save writes r as the record of the sandbox directory sd.
func Save(sd string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("save the state of sandbox %s: %w", r.ID, err)
	}
	return atomicfile.WriteFile(filepath.Join(sd, File), b, 0o600)
}

// Load reads the record of the sandbox directory sd, which must be the sandbox id's.
func Load(sd, id string) (Record, error) {
	var r Record
	b, err := os.ReadFile(filepath.Join(sd, File))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("state of sandbox %s: %w", id, err)
	}
	if r.ID != id {
		return r, errors.New("state of sandbox " + id + " names another sandbox")
	}
	return r, nil
}

// Exists reports whether the sandbox directory sd has a record: a sandbox whose
// create finished, and that no terminate has removed.
func Exists(sd string) bool {
	_, err := os.Stat(filepath.Join(sd, File))
	return err == nil
}

// WriteExitCode records init's exit code in sd's ExitFile: the shim's half of it.
func WriteExitCode(sd string, code int) error {
	return atomicfile.WriteFile(filepath.Join(sd, ExitFile), []byte(strconv.Itoa(code)), 0o644)
}

// ReadExitCode returns the exit code recorded in sd's ExitFile, or nil.
func ReadExitCode(sd string) *int {
	b, err := os.ReadFile(filepath.Join(sd, ExitFile))
	if err != nil {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return &n
}

// ProcStart returns the start time (clock ticks since boot) and state of pid.
func ProcStart(pid int) (uint64, byte, bool) {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return 0, 0, false
	}
	return st.Start, st.State, true
}

// InitAlive reports whether the sandbox's init still runs: its pid is alive and was
// started when the record says (not a reused pid).
func (r Record) InitAlive() bool { return alive(r.Pid, r.PidStart) }

// ShimAlive reports whether the sandbox's shim still runs.
func (r Record) ShimAlive() bool { return alive(r.ShimPid, r.ShimStart) }

func alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	s, state, ok := ProcStart(pid)
	return ok && s == start && state != 'Z' && state != 'X'
}
