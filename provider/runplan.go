package provider

// The one interpreter of a boot plan. Every provider hands RunPlan (or a Runner, to
// run the two phases apart) a Target: the handful of operations it can do in one
// sandbox. What a step means, when it is skipped, how a fallback works, how long the
// sidecar may take and what the report says is decided here, once, so a sandbox boots
// the same wherever it runs.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// Step statuses, the Status of a StepReport.
const (
	StepOK      = "ok"
	StepSkipped = "skipped"
	StepFailed  = "failed"
)

// Phases of a plan, the Phase of a StepReport.
const (
	PhaseBlocking   = "blocking"
	PhaseBackground = "background"
)

// The wait for sandbox-mcp's health after the step that starts it.
const (
	// SidecarWaitTimeout is how long sandbox-mcp may take to answer its health: a
	// loaded machine can take tens of seconds to start a process.
	SidecarWaitTimeout = 60 * time.Second
	// SidecarPollInterval is the pause between two health probes.
	SidecarPollInterval = 20 * time.Millisecond
	// sidecarProbeTimeout bounds one health probe.
	sidecarProbeTimeout = 5 * time.Second
)

// Report sizes.
const (
	// stepOutputMax caps the Output of a StepReport and the output quoted in a reason.
	stepOutputMax = 4096
	// sidecarLogTail is how much of sandbox-mcp's log a failed health wait quotes.
	sidecarLogTail = 2048
)

// ErrExecTimeout is what Target.Exec returns (wrapped) when the command's timeout
// ended it.
var ErrExecTimeout = errors.New("timed out")

// errSandboxEnded is a wait that RunOptions.Ended ended: the sandbox is gone, and so
// is every further step of the phase.
var errSandboxEnded = errors.New("the sandbox ended")

// StepReport is the outcome of one boot step.
type StepReport struct {
	Name string `json:"name"`
	// Phase is PhaseBlocking or PhaseBackground.
	Phase string `json:"phase"`
	// Status is StepOK, StepSkipped or StepFailed.
	Status string `json:"status"`
	// Reason says why a step was skipped or failed, or that its fallback ran.
	Reason string `json:"reason,omitempty"`
	// Output is a command's capped, redacted output.
	Output     string `json:"output,omitempty"`
	DurationMs int64  `json:"durationMs"`
}

// Target is one sandbox as a provider reaches it: what RunPlan needs to run a plan
// in it. Commands run as bash -c in the sandbox's home, with env as their whole
// additional environment (the plan's env and the step's).
type Target interface {
	// Exec runs command to completion. The error is for a command that could not
	// run, or one that timeout ended (wrapping ErrExecTimeout); a command that ran
	// reports its exit code.
	Exec(ctx context.Context, command string, env map[string]string, timeout time.Duration) (ExecResult, error)
	// StartDetached starts command and returns once it runs; the process belongs to
	// the sandbox and outlives the call.
	StartDetached(ctx context.Context, command string, env map[string]string) error
	// WriteFile writes data to path with exactly mode, creating missing parents.
	WriteFile(ctx context.Context, path string, data []byte, mode fs.FileMode) error
	// ReadFile reads a file.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// MkdirAll creates path and its missing parents and gives path exactly mode,
	// also when it existed.
	MkdirAll(ctx context.Context, path string, mode fs.FileMode) error
	// Sidecar is a client of the sandbox's sandbox-mcp API with the session's token.
	// It should not retry refused connections: the runner waits for health itself.
	Sidecar() (*sidecar.Client, error)
}

// RunOptions configure a Runner; the zero value is usable.
type RunOptions struct {
	// SidecarTimeout bounds the wait for sandbox-mcp's health; zero means
	// SidecarWaitTimeout.
	SidecarTimeout time.Duration
	// SidecarLog is sandbox-mcp's log inside the sandbox, quoted when it does not come
	// up; "" means DefaultPaths().SandboxMCPLog().
	SidecarLog string
	// GitMirrors makes the bundles of git-bundle steps; nil means DefaultGitMirrors.
	GitMirrors GitBundler
	// Skip, when set, may veto a step a provider cannot run here: a non-empty reason
	// skips it.
	Skip func(Step) string
	// OnStep, when set, is told every step's outcome as it happens (logs, progress).
	OnStep func(Step, StepReport)
	// Ended, when set, is asked about once a second while the runner waits for the
	// sidecar whether the sandbox has ended (terminated while it booted); an error
	// ends the wait and the phase.
	Ended func(context.Context) error
}

// Runner runs the steps of one plan in one Target and remembers their outcomes. A
// phase runs to its end before the next starts; the runner is not for concurrent use.
type Runner struct {
	plan Plan
	t    Target
	o    RunOptions

	ok        map[string]bool
	have      map[string]bool // Requires → present; nil until first needed
	sidecarUp bool
	report    []StepReport
}

// NewRunner returns a Runner of plan in t.
func NewRunner(plan Plan, t Target, o RunOptions) *Runner {
	if o.SidecarTimeout <= 0 {
		o.SidecarTimeout = SidecarWaitTimeout
	}
	if o.SidecarLog == "" {
		o.SidecarLog = DefaultPaths().SandboxMCPLog()
	}
	return &Runner{plan: plan, t: t, o: o, ok: map[string]bool{}}
}

// RunPlan runs plan's blocking then background steps in t and returns their reports.
// It fails on the first failed fatal step, and when sandbox-mcp did not come up: a
// sandbox without its sidecar is of no use.
func RunPlan(ctx context.Context, plan Plan, t Target, o RunOptions) ([]StepReport, error) {
	r := NewRunner(plan, t, o)
	err := r.RunPhase(ctx, PhaseBlocking)
	if err == nil {
		err = r.RunPhase(ctx, PhaseBackground)
	}
	if err == nil {
		err = r.SidecarError()
	}
	return r.Report(), err
}

// RunPhase runs the steps of one phase (PhaseBlocking or PhaseBackground). A failed
// fatal step, an ended ctx or a sandbox that ended (RunOptions.Ended) stops it with
// an error; other failures are reported and the next step runs.
func (r *Runner) RunPhase(ctx context.Context, phase string) error {
	steps := r.plan.Blocking
	switch phase {
	case PhaseBlocking:
	case PhaseBackground:
		steps = r.plan.Background
	default:
		return fmt.Errorf("run plan: unknown phase %q", phase)
	}
	for _, s := range steps {
		start := time.Now()
		rep := StepReport{Name: s.Name, Phase: phase}
		var err error
		rep.Status, rep.Reason, rep.Output, err = r.step(ctx, s)
		if err != nil {
			rep.Status, rep.Reason = StepFailed, RedactSecrets(err.Error())
		}
		rep.DurationMs = time.Since(start).Milliseconds()
		r.report = append(r.report, rep)
		r.ok[s.Name] = rep.Status == StepOK
		if r.o.OnStep != nil {
			r.o.OnStep(s, rep)
		}
		if err != nil && (s.Fatal || errors.Is(err, errSandboxEnded)) {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// Succeeded reports whether the step named name ran and succeeded.
func (r *Runner) Succeeded(name string) bool { return r.ok[name] }

// SidecarUp reports whether sandbox-mcp was started and answered its health.
func (r *Runner) SidecarUp() bool { return r.sidecarUp }

// SidecarError is nil when sandbox-mcp is up, else why it is not.
func (r *Runner) SidecarError() error {
	if r.sidecarUp {
		return nil
	}
	for _, rep := range r.report {
		if rep.Name == StepNameSandboxMCP && rep.Reason != "" {
			return fmt.Errorf("sandbox-mcp was not started: %s", rep.Reason)
		}
	}
	return errors.New("sandbox-mcp was not started")
}

// Report is a copy of the reports of the steps run so far, in order.
func (r *Runner) Report() []StepReport { return append([]StepReport(nil), r.report...) }

// step runs s and says how it went; err is a failure, a skip is not.
func (r *Runner) step(ctx context.Context, s Step) (status, reason, output string, err error) {
	if why := r.skip(ctx, s); why != "" {
		return StepSkipped, why, "", nil
	}
	output, err = r.do(ctx, s)
	if err != nil && s.Kind == StepRun && s.Fallback != nil {
		// The one fallback rule: a run step whose command fails runs its fallback's
		// command; the step succeeds when that does, and says so.
		fout, ferr := r.exec(ctx, *s.Fallback)
		output = CapOutput(output+fout, stepOutputMax)
		if ferr != nil {
			return "", "", output, fmt.Errorf("%w; fallback %s: %w", err, s.Fallback.Name, ferr)
		}
		return StepOK, "fallback " + s.Fallback.Name + " ran after: " + Tail(err.Error(), 200), output, nil
	}
	if err != nil {
		return "", "", output, err
	}
	return StepOK, "", output, nil
}

// skip says why s does not run, or "". The checks apply to every kind of step alike.
func (r *Runner) skip(ctx context.Context, s Step) string {
	for _, dep := range s.IfAllOK {
		if !r.ok[dep] {
			return "step " + dep + " did not succeed"
		}
	}
	if r.o.Skip != nil {
		if why := r.o.Skip(s); why != "" {
			return why
		}
	}
	if s.Kind == StepService && !r.sidecarUp {
		return "sandbox-mcp is not running"
	}
	if s.Requires != "" {
		have, err := r.installed(ctx, s.Requires)
		if err != nil {
			return "cannot look for " + s.Requires + ": " + RedactSecrets(err.Error())
		}
		if !have {
			return s.Requires + " is not installed"
		}
	}
	return ""
}
