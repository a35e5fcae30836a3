package rules

// Production paths of the binaries every sandbox image has (the local engine binds
// the host's builds there).
const (
	// SandboxMCPBin is the sidecar binary.
	SandboxMCPBin = "/usr/local/bin/sandbox-mcp"
	// ProliferateBin is the CLI agents run.
	ProliferateBin = "/usr/local/bin/proliferate"
)

// PortEgressProxy is the HTTP proxy a local sandbox with egress (its own network
// namespace, outbound through the host) reaches the outside through:
// http://127.0.0.1:3128, set as HTTP_PROXY and HTTPS_PROXY for its commands.
const PortEgressProxy = 3128

// Volume capacities (engine.VolumeSpec.CapacityBytes).
const (
	// DefaultVolumeBytes is a volume's capacity when none is given.
	DefaultVolumeBytes = 1 << 30
	// MinVolumeBytes and MaxVolumeBytes bound a volume's capacity.
	MinVolumeBytes = 16 << 20
	MaxVolumeBytes = 1 << 40
)
