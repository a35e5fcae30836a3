package services

import (
	"cmp"
	"errors"
	"net/http"
	"os"
	"path/filepath"
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

// asInvalid is a failure of apitype's Validate as an ErrInvalid: a value out
// of its bound names its field.
func asInvalid(err error) error {
	if err == nil {
		return nil
	}
	if le := (*rules.LimitError)(nil); errors.As(err, &le) {
		return limitError(le)
	}
	return invalidf("%s", err.Error())
}

// spec is a start request that passed apitype's Validate, with its cwd made
// absolute and its restart policy filled in. It is the one shape of a
// service's options from the request to its record (setSpec) and back for
// every restart (record.spec): nothing reshapes or fills it in again.
type spec struct{ apitype.StartServiceRequest }

// parse is where a start request enters the manager: the one validation
// (apitype.StartServiceRequest.Validate, shared with the CLI and the MCP
// server) and the defaults. The errors match ErrInvalid.
func (m *Manager) parse(req apitype.StartServiceRequest) (spec, error) {
	if err := req.Validate(); err != nil {
		return spec{}, asInvalid(err)
	}
	if req.Cwd == "" {
		req.Cwd = m.cfg.WorkspaceDir
	} else if !filepath.IsAbs(req.Cwd) {
		req.Cwd = filepath.Join(m.cfg.WorkspaceDir, req.Cwd)
	}
	if req.Restart == "" {
		req.Restart = apitype.RestartNo
	}
	return spec{req}, nil
}

// stopSettings is the signal and grace a stop of sp's run uses: its
// stopSignal (SIGTERM when none) and stopTimeoutMs (else def).
func (sp spec) stopSettings(def time.Duration) (syscall.Signal, time.Duration) {
	sig := syscall.SIGTERM
	if s, ok := stopSignals[sp.StopSignal]; ok {
		sig = s
	}
	grace := def
	if sp.StopTimeoutMs != nil {
		grace = stopGrace(*sp.StopTimeoutMs)
	}
	return sig, grace
}

// checkCwd says why a run of sp cannot start in its cwd: a fact of the
// machine, checked at every launch (a restart finds a deleted cwd too).
func checkCwd(cwd string) error {
	fi, err := os.Stat(cwd)
	switch {
	case err != nil:
		return invalidf("cwd %q does not exist", cwd)
	case !fi.IsDir():
		return invalidf("cwd %q is not a directory", cwd)
	}
	return nil
}

// admit refuses req when recording it would take st past rules.MaxServices
// (a new name) or rules.MaxTotalBytes (a request larger than the record it
// replaces; a state already past the budget still lets every service
// restart). It runs twice: on the cached state before a start does
// anything, and under the state lock where the record is written, so
// concurrent starts cannot overshoot.
func admit(st *stateFile, sp spec) error {
	cur, exists := st.Services[sp.Name]
	if !exists && len(st.Services) >= rules.MaxServices {
		return userError(ErrConflict, rules.TooManyServices(len(st.Services), stoppedNames(st)))
	}
	size := sp.Bounds().Bytes()
	old := 0
	if exists {
		old = cur.spec().Bounds().Bytes()
	}
	if size <= old {
		return nil
	}
	total := 0
	for _, r := range st.Services {
		total += r.spec().Bounds().Bytes()
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

// checkStart refuses sp when it does not fit in the state as last read.
func (m *Manager) checkStart(sp spec) error {
	m.refresh()
	m.mu.RLock()
	defer m.mu.RUnlock()
	return admit(m.st, sp)
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

// spec is the options r was started with, as recorded.
func (r *record) spec() spec { return spec{r.StartRequest()} }

// setSpec records sp as the options of r's run.
func (r *record) setSpec(sp spec) { r.SetOptions(sp.StartServiceRequest) }

// respawnSpec is the spec r is started again with: as recorded, once more
// through Validate because a state file is input too (another version, or
// a hand, may have written the entry).
func (r *record) respawnSpec() (spec, error) {
	sp := r.spec()
	return sp, asInvalid(sp.Validate())
}
