package apitype

// DebugStats is the body of GET /api/debug/stats: the sidecar's own resource
// use, so tests and operators can check that load leaves nothing behind.
type DebugStats struct {
	// Goroutines is runtime.NumGoroutine().
	Goroutines int `json:"goroutines"`
	// OpenFDs counts the sidecar's open file descriptors; -1 when unknown.
	OpenFDs int `json:"openFds"`
	// FDLimit is the soft RLIMIT_NOFILE; -1 when unknown.
	FDLimit int `json:"fdLimit"`
	// RSSBytes is the resident set size; -1 when unknown.
	RSSBytes int64 `json:"rssBytes"`
	// TerminalSessions counts live terminal sessions (detached v2 ones included).
	TerminalSessions int `json:"terminalSessions"`
	// Streams counts open SSE streams (logs, events) and terminal connections.
	Streams int64 `json:"streams"`
	// Services counts services in the state; ServicesRunning those running.
	Services        int `json:"services"`
	ServicesRunning int `json:"servicesRunning"`
	// Connections counts open HTTP connections; AuthenticatedConnections
	// those that presented the token; ShedConnections those the connection
	// limiter closed since start; ConnectionLimit is its current cap.
	Connections              int   `json:"connections"`
	AuthenticatedConnections int   `json:"authenticatedConnections"`
	ShedConnections          int64 `json:"shedConnections"`
	ConnectionLimit          int   `json:"connectionLimit"`
}
