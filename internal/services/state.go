package services

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
)

// record is one service in the state file: the wire ServiceInfo plus what the
// manager needs to re-adopt and supervise it safely.
type record struct {
	apitype.ServiceInfo

	// Order is the sequence number of the name's first start (listing order).
	Order int64 `json:"order"`
	// Instance is unique per start; every process of the run carries it in SANDBOX_MCP_SERVICE_INSTANCE.
	Instance string `json:"instance,omitempty"`
	// PGID is the process group (the pid of `bash -c`).
	PGID int `json:"pgid,omitempty"`
	// StartTime is field 22 of /proc/<pid>/stat, to tell a recycled pid apart.
	StartTime        uint64 `json:"startTime,omitempty"`
	MonitorPID       int    `json:"monitorPid,omitempty"`
	MonitorStartTime uint64 `json:"monitorStartTime,omitempty"`
	// Consecutive counts restarts since the service last stayed up long enough.
	Consecutive int `json:"consecutiveRestarts,omitempty"`
	// StopRequested is the instance a stop was requested for, so no process
	// sharing the state takes its exit for a crash.
	StopRequested string `json:"stopRequested,omitempty"`
	// ExitedInstance is the last instance whose exit was recorded.
	ExitedInstance string `json:"exitedInstance,omitempty"`
	// RestartClaimed is the run whose pending restart a process is
	// launching; NextRestartAt stays set until the new run replaces the record.
	RestartClaimed string `json:"restartClaimed,omitempty"`
}

func (r *record) target() target {
	return target{pgid: r.PGID, pgidStart: r.StartTime, instance: r.Instance, monitor: r.MonitorPID, monStart: r.MonitorStartTime}
}

// stateFile is the JSON of <StateDir>/state.json (internal/statefile). The
// manager owns "services"; "exposedPort" is exposure's and is kept as it was
// read.
type stateFile struct {
	Services    map[string]*record `json:"services"`
	ExposedPort json.RawMessage    `json:"exposedPort"`
}

func newState() *stateFile { return &stateFile{Services: map[string]*record{}} }

// clone deep-copies what callers of the cache may see.
func (s *stateFile) clone() *stateFile {
	c := &stateFile{Services: make(map[string]*record, len(s.Services)), ExposedPort: s.ExposedPort}
	for k, v := range s.Services {
		r := *v
		c.Services[k] = &r
	}
	return c
}

// fileStamp tells whether state.json changed since it was read (every write is a rename).
type fileStamp struct {
	ino   uint64
	size  int64
	mtime int64
}

func stampOf(fi os.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = sys.Ino
	}
	return st
}

// statStamp is stampOf(os.Stat(path)) without its allocations: List stats
// the state file on every call.
func statStamp(path string) (fileStamp, error) {
	var sys syscall.Stat_t
	for {
		err := syscall.Stat(path, &sys)
		if err == nil {
			break
		}
		if err != syscall.EINTR {
			return fileStamp{}, &os.PathError{Op: "stat", Path: path, Err: err}
		}
	}
	return fileStamp{ino: sys.Ino, size: sys.Size, mtime: sys.Mtim.Nano()}, nil
}

// errCorrupt marks a state file that exists but cannot be used.
var errCorrupt = statefile.ErrUnusable

// readState reads path; a missing file is an empty state.
func readState(path string) (*stateFile, fileStamp, error) {
	st, stamp, _, err := readStateRaw(path)
	return st, stamp, err
}

// readStateRaw is readState that also returns the file's bytes (nil when it is missing).
// A file that cannot be used as the state (not JSON, not a regular file,
// unreadable) is an error matching errCorrupt, for the caller to move aside.
func readStateRaw(path string) (*stateFile, fileStamp, []byte, error) {
	raw, fi, err := statefile.Read(path)
	if err != nil {
		var stamp fileStamp
		if fi != nil {
			stamp = stampOf(fi)
		}
		return nil, stamp, nil, err
	}
	if raw == nil {
		return newState(), fileStamp{}, nil, nil
	}
	st := newState()
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(st); err != nil {
		return nil, stampOf(fi), nil, fmt.Errorf("decode %s: %w: %w", path, errCorrupt, err)
	}
	if st.Services == nil {
		st.Services = map[string]*record{}
	}
	unordered := false
	for name, r := range st.Services {
		if r == nil || ValidateName(name) != nil {
			delete(st.Services, name)
			continue
		}
		r.Name = name
		unordered = unordered || r.Order == 0
	}
	if unordered {
		orderLegacy(st, raw)
	}
	return st, stampOf(fi), raw, nil
}

// orderLegacy gives the entries without an order (written by the old
// sidecar, whose services object kept its keys in first-start order)
// negative orders in the order of their keys, so they list in the order they
// were first started and before every service started since.
func orderLegacy(st *stateFile, raw []byte) {
	names := serviceKeys(raw)
	for i, name := range names {
		if r := st.Services[name]; r != nil && r.Order == 0 {
			r.Order = int64(i - len(names))
		}
	}
}

// serviceKeys returns the keys of the "services" object of a state file in
// the order they appear; nil when raw is not shaped like one.
func serviceKeys(raw []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil
		}
		if key != "services" {
			if dec.Decode(&json.RawMessage{}) != nil {
				return nil
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return nil
		}
		var names []string
		for dec.More() {
			name, err := dec.Token()
			if err != nil || dec.Decode(&json.RawMessage{}) != nil {
				return nil
			}
			if s, ok := name.(string); ok {
				names = append(names, s)
			}
		}
		return names
	}
	return nil
}

// sanitizeState refuses what no sidecar would have written and what would
// make it signal processes that are not a service's: a pid, process group or
// monitor pid of 1 or less, or this process's own pid or group (a stop would
// send kill(-1) or kill the sidecar).
// A refused record keeps its name and settings but no process: it reads as
// ended with a reason. It returns what it refused.
func sanitizeState(st *stateFile) []string {
	var problems []string
	self, group := os.Getpid(), syscall.Getpgrp()
	bad := func(pid int) bool { return pid < 0 || pid == 1 || pid == self || pid == group }
	for name, r := range st.Services {
		if !bad(r.PID) && !bad(r.PGID) && !bad(r.MonitorPID) {
			continue
		}
		problems = append(problems, fmt.Sprintf("service %q: pid %d, pgid %d, monitor pid %d", name, r.PID, r.PGID, r.MonitorPID))
		r.PID, r.PGID, r.StartTime, r.MonitorPID, r.MonitorStartTime = 0, 0, 0, 0, 0
		if r.Status == apitype.StatusRunning || r.NextRestartAt != nil {
			r.Status = apitype.StatusError
			r.Reason = "state entry refused: untrusted process ids"
			r.Ready = false
			r.NextRestartAt, r.RestartClaimed = nil, ""
			r.ExitedInstance = r.Instance
		}
	}
	return problems
}

// encodeState is the content of the state file for st.
func encodeState(st *stateFile) ([]byte, error) { return statefile.Encode(st) }

// writeState replaces path atomically with b from encodeState.
func writeState(path string, b []byte) (fileStamp, error) {
	if err := statefile.Write(path, b); err != nil {
		return fileStamp{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return stampOf(fi), nil
}

// quarantine moves a corrupt state file aside so the sidecar keeps serving.
func quarantine(path string, now time.Time) (string, error) {
	dst := fmt.Sprintf("%s.corrupt-%d", path, now.UnixNano())
	return dst, os.Rename(path, dst)
}
