package rules

import (
	"fmt"
	"strings"
)

// Bounds of a service start request (CONTRACT.md "Supervision"). Every side
// that builds or accepts one — the sidecar's service manager, the proliferate
// CLI and the MCP tools — checks them with the functions below, so a caller
// gets the same message wherever the request is refused.
const (
	// MaxCommandBytes bounds a service's command (64 KiB).
	MaxCommandBytes = 64 << 10
	// MaxCwdBytes bounds a service's working directory as given (4 KiB, PATH_MAX).
	MaxCwdBytes = 4 << 10
	// MaxEnvKeys bounds how many variables a start request adds.
	MaxEnvKeys = 256
	// MaxEnvBytes bounds the key and value bytes of those variables together (64 KiB).
	MaxEnvBytes = 64 << 10
	// MaxProbeBytes bounds a readiness probe's URL or log pattern (4 KiB).
	MaxProbeBytes = 4 << 10
	// MaxStopTimeoutMs bounds stopTimeoutMs, the grace before SIGKILL (5 minutes).
	MaxStopTimeoutMs = 300_000
	// MaxReadyTimeoutMs bounds readiness.timeoutMs (1 hour); 0 means the default.
	MaxReadyTimeoutMs = 3_600_000
	// MaxRestartsLimit bounds maxRestarts.
	MaxRestartsLimit = 1000
	// MaxServices bounds the services recorded in one sidecar's state,
	// stopped ones included: a start under a new name beyond it is refused.
	MaxServices = 256
	// MaxTotalBytes bounds what all recorded services hold together of the
	// above (Start.Bytes): 4 MiB. Every service at every bound would make a
	// 37 MB state file that each start, stop and restart reads and rewrites;
	// this keeps it under about 5 MB while any one service may still use its
	// full bounds.
	MaxTotalBytes = 4 << 20
)

// LimitError is a request value outside its bound. Field is the request field
// as the JSON wire format spells it ("env", "readiness.timeoutMs"); Msg, the
// whole message, starts with it.
type LimitError struct {
	Field string
	Msg   string
}

func (e *LimitError) Error() string { return e.Msg }

func limitf(field, format string, args ...any) *LimitError {
	return &LimitError{Field: field, Msg: field + " " + fmt.Sprintf(format, args...)}
}

// CheckCommand checks the size of a service's command.
func CheckCommand(command string) error {
	if len(command) > MaxCommandBytes {
		return limitf("command", "is %d bytes long; the limit is %d bytes (64 KiB)", len(command), MaxCommandBytes)
	}
	return nil
}

// CheckCwd checks the size of a service's working directory.
func CheckCwd(cwd string) error {
	if len(cwd) > MaxCwdBytes {
		return limitf("cwd", "is %d bytes long; the limit is %d bytes (4 KiB)", len(cwd), MaxCwdBytes)
	}
	return nil
}

// CheckEnv checks how many variables env holds and their total size (keys and values).
func CheckEnv(env map[string]string) error {
	if len(env) > MaxEnvKeys {
		return limitf("env", "has %d variables; the limit is %d", len(env), MaxEnvKeys)
	}
	n := 0
	for k, v := range env {
		n += len(k) + len(v)
	}
	if n > MaxEnvBytes {
		return limitf("env", "holds %d bytes of keys and values; the limit is %d bytes (64 KiB)", n, MaxEnvBytes)
	}
	return nil
}

// CheckStopTimeoutMs checks stopTimeoutMs.
func CheckStopTimeoutMs(ms int) error {
	if ms < 0 || ms > MaxStopTimeoutMs {
		return limitf("stopTimeoutMs", "must be from 0 to %d (5 minutes), got %d", MaxStopTimeoutMs, ms)
	}
	return nil
}

// CheckReadyTimeoutMs checks readiness.timeoutMs; 0 (not given) is the default.
func CheckReadyTimeoutMs(ms int) error {
	if ms < 0 || ms > MaxReadyTimeoutMs {
		return limitf("readiness.timeoutMs", "must be from 1 to %d (1 hour), got %d", MaxReadyTimeoutMs, ms)
	}
	return nil
}

// CheckMaxRestarts checks maxRestarts.
func CheckMaxRestarts(n int) error {
	if n < 0 || n > MaxRestartsLimit {
		return limitf("maxRestarts", "must be from 0 to %d, got %d", MaxRestartsLimit, n)
	}
	return nil
}

// CheckReadyHTTP checks the size of a readiness URL.
func CheckReadyHTTP(url string) error {
	if len(url) > MaxProbeBytes {
		return limitf("readiness.http", "is %d bytes long; the limit is %d bytes (4 KiB)", len(url), MaxProbeBytes)
	}
	return nil
}

// CheckReadyLog checks the size of a readiness log pattern.
func CheckReadyLog(pattern string) error {
	if len(pattern) > MaxProbeBytes {
		return limitf("readiness.log", "is %d bytes long; the limit is %d bytes (4 KiB)", len(pattern), MaxProbeBytes)
	}
	return nil
}

// TotalTooLarge is the message refusing a start of size bytes (Start.Bytes)
// that would take the recorded services past MaxTotalBytes: total is what
// they hold without it. stopped is as for TooManyServices.
func TotalTooLarge(size, total int, stopped []string) string {
	msg := fmt.Sprintf("cannot record this service: its command, cwd, env and probe (%d bytes) and those of the services recorded would hold %d bytes together; the limit is %d bytes (4 MiB)",
		size, total+size, MaxTotalBytes)
	if len(stopped) == 0 {
		return msg + "; shorten the command or env, or stop a service and start this one under its name (a start under an existing name replaces it)"
	}
	return msg + fmt.Sprintf("; shorten the command or env, or start it under the name of a stopped service (%s) to replace it", quoteSome(stopped))
}

func quoteSome(names []string) string {
	q := make([]string, 0, 3)
	for _, s := range names[:min(len(names), 3)] {
		q = append(q, fmt.Sprintf("%q", s))
	}
	return strings.Join(q, ", ")
}

// TooManyServices is the message refusing a new service name when count
// services are recorded already. stopped names some stopped services (up to
// three are quoted), whose names a new start may reuse.
func TooManyServices(count int, stopped []string) string {
	msg := fmt.Sprintf("cannot add another service: %d are recorded and the limit is %d", count, MaxServices)
	if len(stopped) == 0 {
		return msg + "; stop one, then start the new command under its name (a start under an existing name replaces it)"
	}
	return msg + fmt.Sprintf("; start the new command under the name of a stopped service (%s) to replace it", quoteSome(stopped))
}

// Start is what the bounds apply to in a service start request, whichever
// shape the request arrives in (HTTP body, CLI flags, MCP tool input).
// Pointers are nil for options not given.
type Start struct {
	Command        string
	Cwd            string
	Env            map[string]string
	StopTimeoutMs  *int
	MaxRestarts    *int
	ReadyHTTP      string
	ReadyLog       string
	ReadyTimeoutMs int
}

// Bytes is what s counts against MaxTotalBytes: the bytes of the command,
// cwd, env keys and values, and readiness URL and pattern.
func (s Start) Bytes() int {
	n := len(s.Command) + len(s.Cwd) + len(s.ReadyHTTP) + len(s.ReadyLog)
	for k, v := range s.Env {
		n += len(k) + len(v)
	}
	return n
}

// Check returns the first bound s breaks, as a *LimitError, or nil.
func (s Start) Check() error {
	checks := []error{CheckCommand(s.Command), CheckCwd(s.Cwd), CheckEnv(s.Env)}
	if s.StopTimeoutMs != nil {
		checks = append(checks, CheckStopTimeoutMs(*s.StopTimeoutMs))
	}
	if s.MaxRestarts != nil {
		checks = append(checks, CheckMaxRestarts(*s.MaxRestarts))
	}
	checks = append(checks, CheckReadyHTTP(s.ReadyHTTP), CheckReadyLog(s.ReadyLog), CheckReadyTimeoutMs(s.ReadyTimeoutMs))
	for _, err := range checks {
		if err != nil {
			return err
		}
	}
	return nil
}

// Terminal sessions: DefaultMaxTerminals live at once unless EnvMaxTerminals says
// otherwise (1 to MaxTerminalsCeiling).
const (
	DefaultMaxTerminals = 64
	MaxTerminalsCeiling = 4096
)
