package services

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ErrConflict is matched (errors.Is) by the refusal of a start that does not
// fit in the state: a new name beyond rules.MaxServices services, or a
// request that would take them past rules.MaxTotalBytes.
var ErrConflict = errors.New("conflict")

// limitError is a request value outside its bound (rules.LimitError), as an
// ErrInvalid the caller must fix; errors.As finds the field it names.
type limitError struct{ *rules.LimitError }

func (e limitError) Is(target error) bool { return target == ErrInvalid }
func (e limitError) Unwrap() error        { return e.LimitError }

// checkLimits checks req against the bounds of rules: sizes and counts of the
// command, cwd, env and probes, and the ranges of the timeouts and restarts.
// It runs before anything is resolved or started.
func checkLimits(req apitype.StartServiceRequest) error {
	var le *rules.LimitError
	if errors.As(startOf(req).Check(), &le) {
		return limitError{le}
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
		return &userError{kind: ErrConflict, msg: rules.TooManyServices(len(st.Services), stoppedNames(st))}
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
		return &userError{kind: ErrConflict, msg: rules.TotalTooLarge(size, total-old, stoppedNames(st))}
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
