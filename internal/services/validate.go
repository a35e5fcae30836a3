package services

import (
	"cmp"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ErrConflict is matched (errors.Is) by the refusal of a start that does not
// fit in the state: a new name beyond rules.MaxServices services, or a
// request that would take them past rules.MaxTotalBytes.
var ErrConflict = errors.New("conflict")

// limitError is a request value outside its bound (rules.LimitError), as an
// ErrInvalid the caller must fix: a 400 naming the "field"; errors.As finds
// the *rules.LimitError.
func limitError(le *rules.LimitError) error {
	return &fault.Error{Status: http.StatusBadRequest, Msg: le.Error(),
		Fields: map[string]any{"field": le.Field}, Err: le, Kind: ErrInvalid}
}

// checkLimits checks req against the bounds of rules: sizes and counts of the
// command, cwd, env and probes, and the ranges of the timeouts and restarts.
// It runs before anything is resolved or started.
func checkLimits(req apitype.StartServiceRequest) error {
	var le *rules.LimitError
	if errors.As(startOf(req).Check(), &le) {
		return limitError(le)
	}
	return nil
}

// startOf is what rules bounds of req.
func startOf(req apitype.StartServiceRequest) rules.Start {
	b := rules.Start{
		Command: req.Command, Cwd: req.Cwd, Env: req.Env,
		StopTimeoutMs: req.StopTimeoutMs, MaxRestarts: req.MaxRestarts,
	}
	if rd := req.Readiness; rd != nil {
		b.ReadyHTTP, b.ReadyLog, b.ReadyTimeoutMs = rd.HTTP, rd.Log, rd.TimeoutMs
	}
	return b
}

// admit refuses req when recording it would take st past rules.MaxServices
// (a new name) or rules.MaxTotalBytes (a request larger than the record it
// replaces; a state already past the budget still lets every service
// restart). It runs twice: on the cached state before a start does
// anything, and under the state lock where the record is written, so
// concurrent starts cannot overshoot.
func admit(st *stateFile, req apitype.StartServiceRequest) error {
	cur, exists := st.Services[req.Name]
	if !exists && len(st.Services) >= rules.MaxServices {
		return userError(ErrConflict, rules.TooManyServices(len(st.Services), stoppedNames(st)))
	}
	size := startOf(req).Bytes()
	old := 0
	if exists {
		old = startOf(requestOf(cur)).Bytes()
	}
	if size <= old {
		return nil
	}
	total := 0
	for _, r := range st.Services {
		total += startOf(requestOf(r)).Bytes()
	}
	if total-old+size > rules.MaxTotalBytes {
		return userError(ErrConflict, rules.TotalTooLarge(size, total-old, stoppedNames(st)))
	}
	return nil
}

// stoppedNames lists the services that neither run nor wait to restart, the
// longest stopped first: names a new start may take over.
func stoppedNames(st *stateFile) []string {
	type old struct {
		name string
		at   int64
	}
	var stopped []old
	for n, r := range st.Services {
		if r.Status != apitype.StatusRunning && r.NextRestartAt == nil {
			at := r.StartedAt
			if r.StoppedAt != nil {
				at = *r.StoppedAt
			}
			stopped = append(stopped, old{n, at})
		}
	}
	slices.SortFunc(stopped, func(a, b old) int {
		return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.name, b.name))
	})
	names := make([]string, len(stopped))
	for i, s := range stopped {
		names[i] = s.name
	}
	return names
}

// checkStart is the bounds check of a start request: its limits, then
// whether it fits in the state as last read.
func (m *Manager) checkStart(req apitype.StartServiceRequest) error {
	if err := checkLimits(req); err != nil {
		return err
	}
	m.refresh()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return admit(m.st, req)
}

// stopGrace is the grace of a recorded stopTimeoutMs, clamped to its bounds:
// a state file written before them, or by hand, may hold any number, and
// one past 9.2e12 would overflow into an instant SIGKILL.
func stopGrace(ms int) time.Duration {
	return time.Duration(min(max(ms, 0), rules.MaxStopTimeoutMs)) * time.Millisecond
}

var stopSignals = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM,
	"SIGINT":  syscall.SIGINT,
	"SIGHUP":  syscall.SIGHUP,
	"SIGQUIT": syscall.SIGQUIT,
}

// maxCommandBytes is the longest command `bash -c` can be given: the
// kernel's limit of one argument (MAX_ARG_STRLEN, 128 KiB with its NUL).
const maxCommandBytes = 128<<10 - 1

// normalize validates req and fills its defaults (cwd, restart policy).
func (m *Manager) normalize(req apitype.StartServiceRequest) (apitype.StartServiceRequest, error) {
	if req.Name == "" || strings.TrimSpace(req.Command) == "" {
		return req, invalidf("name and command are required")
	}
	if err := ValidateName(req.Name); err != nil {
		return req, err
	}
	if err := m.checkStart(req); err != nil {
		return req, err
	}
	if strings.IndexByte(req.Command, 0) >= 0 {
		return req, invalidf("command must not contain NUL bytes")
	}
	if len(req.Command) > maxCommandBytes {
		return req, invalidf("command is %d bytes long; the limit is %d", len(req.Command), maxCommandBytes)
	}
	if req.Cwd == "" {
		req.Cwd = m.cfg.WorkspaceDir
	} else if !filepath.IsAbs(req.Cwd) {
		req.Cwd = filepath.Join(m.cfg.WorkspaceDir, req.Cwd)
	}
	fi, err := os.Stat(req.Cwd)
	switch {
	case err != nil:
		return req, invalidf("cwd %q does not exist", req.Cwd)
	case !fi.IsDir():
		return req, invalidf("cwd %q is not a directory", req.Cwd)
	}
	switch req.Restart {
	case "":
		req.Restart = apitype.RestartNo
	case apitype.RestartNo, apitype.RestartOnFailure, apitype.RestartAlways:
	default:
		return req, invalidf("restart must be %q, %q or %q", apitype.RestartNo, apitype.RestartOnFailure, apitype.RestartAlways)
	}
	if req.MaxRestarts != nil && *req.MaxRestarts < 0 {
		return req, invalidf("maxRestarts must be 0 or more")
	}
	if req.StopSignal != "" {
		if _, ok := stopSignals[req.StopSignal]; !ok {
			return req, invalidf("stopSignal must be one of SIGTERM, SIGINT, SIGHUP, SIGQUIT")
		}
	}
	if req.StopTimeoutMs != nil && *req.StopTimeoutMs < 0 {
		return req, invalidf("stopTimeoutMs must be 0 or more")
	}
	for k, v := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return req, invalidf("env key %q is not a valid environment variable name", k)
		}
	}
	if rd := req.Readiness; rd != nil {
		n := 0
		if rd.TCP != nil {
			n++
			if *rd.TCP < 1 || *rd.TCP > 65535 {
				return req, invalidf("readiness.tcp must be a port from 1 to 65535")
			}
		}
		if rd.HTTP != "" {
			n++
			u, err := url.Parse(rd.HTTP)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return req, invalidf("readiness.http must be an http:// or https:// URL")
			}
		}
		if rd.Log != "" {
			n++
			if _, err := regexp.Compile(rd.Log); err != nil {
				return req, invalidf("readiness.log is not a valid regular expression: %v", err)
			}
		}
		if n != 1 {
			return req, invalidf("readiness must have exactly one of tcp, http or log")
		}
		if rd.TimeoutMs < 0 {
			return req, invalidf("readiness.timeoutMs must be 0 or more")
		}
	}
	return req, nil
}

// requestOf rebuilds the start request a record was started with.
func requestOf(r *record) apitype.StartServiceRequest {
	return apitype.StartServiceRequest{
		Name: r.Name, Command: r.Command, Cwd: r.Cwd,
		Restart: r.Restart, MaxRestarts: r.MaxRestarts, Readiness: r.Readiness,
		Env: r.Env, StopSignal: r.StopSignal, StopTimeoutMs: r.StopTimeoutMs,
	}
}
