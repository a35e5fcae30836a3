package rules

// Production paths of the binaries every sandbox image has (the local engine binds
// the host's builds there).
const (
	// SandboxMCPBin is the sidecar binary.
	SandboxMCPBin = "/usr/local/bin/sandbox-mcp"
	// ProliferateBin is the CLI agents run.
	ProliferateBin = "/usr/local/bin/proliferate"
)
