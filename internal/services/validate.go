package services

import (
	"cmp"
	"errors"
	"slices"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/apitype"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ErrConflict is matched (errors.Is) by the refusal of a new service name
// when the state already holds rules.MaxServices services.
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
	b := rules.Start{
		Command: req.Command, Cwd: req.Cwd, Env: req.Env,
		StopTimeoutMs: req.StopTimeoutMs, MaxRestarts: req.MaxRestarts,
	}
	if rd := req.Readiness; rd != nil {
		b.ReadyHTTP, b.ReadyLog, b.ReadyTimeoutMs = rd.HTTP, rd.Log, rd.TimeoutMs
	}
	var le *rules.LimitError
	if errors.As(b.Check(), &le) {
		return limitError{le}
	}
	return nil
}

// admit refuses a name new to st when st holds rules.MaxServices services
// already. It runs twice: on the cached state before a start does anything,
// and under the state lock where the record is created, so concurrent starts
// of new names cannot overshoot.
func admit(st *stateFile, name string) error {
	if _, ok := st.Services[name]; ok || len(st.Services) < rules.MaxServices {
		return nil
	}
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
	// The longest stopped first: the likeliest to be free to reuse.
	slices.SortFunc(stopped, func(a, b old) int {
		return cmp.Or(cmp.Compare(a.at, b.at), strings.Compare(a.name, b.name))
	})
	names := make([]string, len(stopped))
	for i, s := range stopped {
		names[i] = s.name
	}
	return &userError{kind: ErrConflict, msg: rules.TooManyServices(len(st.Services), names)}
}

// checkStart is the bounds check of a start request: its limits, then
// whether its name fits in the state as last read.
func (m *Manager) checkStart(req apitype.StartServiceRequest) error {
	if err := checkLimits(req); err != nil {
		return err
	}
	m.refresh()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return admit(m.st, req.Name)
}
