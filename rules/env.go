package rules

// Environment variables read or set across the sandbox. internal/config holds
// their defaults and help texts (config.Settings); this is where their names
// are spelled.
const (
	// EnvAuthToken is the bearer token of the sidecar API.
	EnvAuthToken = "SANDBOX_MCP_AUTH_TOKEN"
	// EnvAuthTokenFallback is read when EnvAuthToken is unset (the platform's name).
	EnvAuthTokenFallback = "SERVICE_TO_SERVICE_AUTH_TOKEN"
	// EnvAddr is the API listen address.
	EnvAddr = "SANDBOX_MCP_ADDR"
	// EnvWorkspaceDir is the workspace.
	EnvWorkspaceDir = "WORKSPACE_DIR"
	// EnvStateDir holds state.json and the service logs.
	EnvStateDir = "SANDBOX_MCP_STATE_DIR"
	// EnvCaddySnippet is the user Caddy snippet the sidecar writes.
	EnvCaddySnippet = "SANDBOX_MCP_CADDY_SNIPPET"
	// EnvCaddyAdmin is Caddy's admin endpoint.
	EnvCaddyAdmin = "SANDBOX_MCP_CADDY_ADMIN"
	// EnvCaddyfile is the main Caddyfile.
	EnvCaddyfile = "SANDBOX_MCP_CADDYFILE"
	// EnvPreviewAddr is the preview proxy's listener.
	EnvPreviewAddr = "SANDBOX_MCP_PREVIEW_ADDR"
	// EnvLogLevel is the sidecar's log level (info, debug).
	EnvLogLevel = "SANDBOX_MCP_LOG_LEVEL"
	// EnvGOGC is the Go runtime's GC target; the sidecar only checks whether it is set.
	EnvGOGC = "GOGC"
	// EnvMaxTerminals caps the live terminal sessions (1-4096).
	EnvMaxTerminals = "SANDBOX_MCP_MAX_TERMINALS"
	// EnvSidecarURL is where the CLI and the MCP mode reach the API.
	EnvSidecarURL = "PROLIFERATE_SANDBOX_MCP_URL"
	// EnvGatewayURL is the platform's actions gateway.
	EnvGatewayURL = "PROLIFERATE_GATEWAY_URL"
	// EnvSessionID is the platform session the gateway calls belong to.
	EnvSessionID = "PROLIFERATE_SESSION_ID"
)

// Environment of the sandbox's daemons (sandbox-daemon, sandbox-agent), set
// by the boot plan (provider).
const (
	// EnvWorkspaceRoot is the workspace the daemon serves.
	EnvWorkspaceRoot = "PROLIFERATE_WORKSPACE_ROOT"
	// EnvSessionToken is the token the daemon accepts (the sidecar's).
	EnvSessionToken = "PROLIFERATE_SESSION_TOKEN"
	// EnvGatewayAuthToken is what a manager session's agent sends the gateway.
	EnvGatewayAuthToken = "PROLIFERATE_GATEWAY_AUTH_TOKEN"
	// EnvManagerSessionID is the session a manager session's agent manages.
	EnvManagerSessionID = "PROLIFERATE_MANAGER_SESSION_ID"
)

// NoToken is the contract's message when neither token variable is set.
const NoToken = "Auth token not set. Set " + EnvAuthToken + " or " + EnvAuthTokenFallback + "."

// Markers the sidecar sets in the environment of processes it starts.
const (
	// EnvService names the service a process belongs to; inherited by its
	// children, read back from /proc/<pid>/environ to attribute ports.
	EnvService = "SANDBOX_MCP_SERVICE"
	// EnvServiceInstance is unique per start of a service; finds every process
	// of one run, even those that left its process group.
	EnvServiceInstance = "SANDBOX_MCP_SERVICE_INSTANCE"
	// EnvInternal selects a hidden mode of the sandbox-mcp binary re-executed
	// by itself (the service monitor).
	EnvInternal = "SANDBOX_MCP_INTERNAL"
	// EnvMonitorInstance marks a service monitor with the instance it runs.
	EnvMonitorInstance = "SANDBOX_MCP_MONITOR_INSTANCE"
)

// EnvNames lists every variable name spelled in this file and bastion.go, for the test that keeps
// them from being spelled anywhere else.
func EnvNames() []string {
	return []string{EnvAuthToken, EnvAuthTokenFallback, EnvAddr, EnvWorkspaceDir, EnvStateDir,
		EnvCaddySnippet, EnvCaddyAdmin, EnvCaddyfile, EnvPreviewAddr, EnvLogLevel, EnvMaxTerminals,
		EnvSidecarURL, EnvGatewayURL, EnvSessionID, EnvWorkspaceRoot, EnvSessionToken,
		EnvGatewayAuthToken, EnvManagerSessionID, EnvService, EnvServiceInstance, EnvInternal,
		EnvMonitorInstance, EnvBastionToken, EnvBastionGitToken, EnvBastionAgentToken}
}
