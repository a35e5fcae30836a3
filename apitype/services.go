package apitype

// Service statuses. A service waiting to restart is StatusError with NextRestartAt set.
const (
	StatusRunning = "running"
	StatusStopped = "stopped"
	StatusError   = "error"
)

// Restart policies.
const (
	RestartNo        = "no"
	RestartOnFailure = "on-failure"
	RestartAlways    = "always"
)

// ServiceInfo describes one service, in API answers and in the state file.
type ServiceInfo struct {
	Name      string `json:"name"`
	Command   string `json:"command"`
	Cwd       string `json:"cwd"`
	PID       int    `json:"pid"`
	Status    string `json:"status"`
	StartedAt int64  `json:"startedAt"` // epoch milliseconds
	LogFile   string `json:"logFile"`

	// Supervision extension (CONTRACT.md "Supervision").

	// Ready is true once the readiness probe passed (at once without a probe).
	Ready bool `json:"ready"`
	// Restarts counts automatic restarts since the service was last started by a caller.
	Restarts int `json:"restarts"`
	// ExitCode is the last exit code of the main process (128+signal when killed by one).
	ExitCode *int `json:"exitCode,omitempty"`
	// LastExitAt, NextRestartAt and StoppedAt are epoch milliseconds.
	LastExitAt    *int64 `json:"lastExitAt,omitempty"`
	NextRestartAt *int64 `json:"nextRestartAt,omitempty"`
	StoppedAt     *int64 `json:"stoppedAt,omitempty"`
	// Reason says why the service is in error when the exit code does not (readiness timeout, restarts exhausted).
	Reason string `json:"reason,omitempty"`

	// Options it was started with, echoed back.
	Restart       string            `json:"restart,omitempty"`
	MaxRestarts   *int              `json:"maxRestarts,omitempty"`
	Readiness     *Readiness        `json:"readiness,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	StopSignal    string            `json:"stopSignal,omitempty"`
	StopTimeoutMs *int              `json:"stopTimeoutMs,omitempty"`
}

// StartRequest is the request that starts s again with the options it was
// started with.
func (s ServiceInfo) StartRequest() StartServiceRequest {
	return StartServiceRequest{
		Name: s.Name, Command: s.Command, Cwd: s.Cwd,
		Restart: s.Restart, MaxRestarts: s.MaxRestarts, Readiness: s.Readiness,
		Env: s.Env, StopSignal: s.StopSignal, StopTimeoutMs: s.StopTimeoutMs,
	}
}

// SetOptions echoes req's name, command, cwd and options in s: the inverse
// of StartRequest.
func (s *ServiceInfo) SetOptions(req StartServiceRequest) {
	s.Name, s.Command, s.Cwd = req.Name, req.Command, req.Cwd
	s.Restart, s.MaxRestarts, s.Readiness, s.Env = req.Restart, req.MaxRestarts, req.Readiness, req.Env
	s.StopSignal, s.StopTimeoutMs = req.StopSignal, req.StopTimeoutMs
}

// Readiness is how a service proves it is ready: exactly one of TCP, HTTP or Log.
type Readiness struct {
	TCP       *int   `json:"tcp,omitempty"`
	HTTP      string `json:"http,omitempty"`
	Log       string `json:"log,omitempty"`
	TimeoutMs int    `json:"timeoutMs,omitempty"`
}

// StartServiceRequest is the body of POST /api/services.
type StartServiceRequest struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	Cwd     string `json:"cwd,omitempty"`

	Restart       string            `json:"restart,omitempty"`
	MaxRestarts   *int              `json:"maxRestarts,omitempty"`
	Readiness     *Readiness        `json:"readiness,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	StopSignal    string            `json:"stopSignal,omitempty"`
	StopTimeoutMs *int              `json:"stopTimeoutMs,omitempty"`
}

// ServicesResponse is the body of GET /api/services.
type ServicesResponse struct {
	Services    []ServiceInfo `json:"services"`
	ExposedPort *int          `json:"exposedPort"`
}

// ServiceResponse is {"service": ServiceInfo}.
type ServiceResponse struct {
	Service ServiceInfo `json:"service"`
}

// LogFrame is one SSE data payload of GET /api/logs/{name}.
type LogFrame struct {
	Type    string `json:"type"` // initial, append, error
	Content string `json:"content,omitempty"`
	Message string `json:"message,omitempty"`
}

// LogLinesResponse is the body of GET /api/logs/{name}?tail=N.
type LogLinesResponse struct {
	Lines []string `json:"lines"`
}

// Event types of GET /api/events.
const (
	EventStarted    = "started"
	EventReady      = "ready"
	EventExited     = "exited"
	EventRestarting = "restarting"
	EventStopped    = "stopped"
	EventExposed    = "exposed"
)

// Event is one SSE data payload of GET /api/events.
type Event struct {
	Type          string `json:"type"`
	Service       string `json:"service,omitempty"`
	Time          int64  `json:"time"` // epoch milliseconds
	ExitCode      *int   `json:"exitCode,omitempty"`
	NextRestartAt *int64 `json:"nextRestartAt,omitempty"`
	Port          *int   `json:"port,omitempty"`
	Reason        string `json:"reason,omitempty"`
}
