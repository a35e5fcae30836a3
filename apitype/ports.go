package apitype

// Address families of a listening port.
const (
	FamilyIPv4 = "ipv4"
	FamilyIPv6 = "ipv6"
)

// Kinds of known infrastructure listening in the sandbox.
const (
	PortKindSidecar  = "sidecar"
	PortKindCaddy    = "caddy"
	PortKindOpenCode = "opencode"
	PortKindVSCode   = "vscode"
	PortKindSSHD     = "sshd"
)

// Port is one TCP socket listening in the sandbox (GET /api/ports).
type Port struct {
	Port int `json:"port"`
	// Address is the local address it listens on: "0.0.0.0", "::", "127.0.0.1", ...
	Address string `json:"address"`
	// Family is FamilyIPv4 or FamilyIPv6.
	Family string `json:"family"`
	// PID and Command are the owning process, omitted when it cannot be seen.
	PID     int    `json:"pid,omitempty"`
	Command string `json:"command,omitempty"`
	// Service is the service the process belongs to, omitted when none.
	Service string `json:"service,omitempty"`
	// Exposed reports whether this is the exposed port (POST /api/expose).
	Exposed bool `json:"exposed"`
	// Kind marks known infrastructure (PortKind*), omitted otherwise.
	Kind string `json:"kind,omitempty"`
}

// PortsResponse is the body of GET /api/ports.
type PortsResponse struct {
	Ports []Port `json:"ports"`
}
