package apitype

// TerminalSession describes one terminal session in GET /api/terminal/sessions.
type TerminalSession struct {
	// ID is the client-chosen id (protocol v2) or a generated "v1-…" id.
	ID string `json:"id"`
	// PID is the shell's process id; it leads the session of every process
	// started in the terminal.
	PID int `json:"pid"`
	// Protocol is "v1" or "v2".
	Protocol string `json:"protocol"`
	Cols     int    `json:"cols"`
	Rows     int    `json:"rows"`
	// Clients is the number of attached connections.
	Clients int `json:"clients"`
	// CreatedAt and LastActivityAt are epoch milliseconds; activity is
	// input, output or an attach.
	CreatedAt      int64 `json:"createdAt"`
	LastActivityAt int64 `json:"lastActivityAt"`
	// OutputBytes is the total output so far, the offset a v2 client resumes from.
	OutputBytes int64 `json:"outputBytes"`
}

// TerminalSessionsResponse is the body of GET /api/terminal/sessions.
type TerminalSessionsResponse struct {
	Sessions []TerminalSession `json:"sessions"`
}
