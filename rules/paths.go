package rules

// Paths of a real sandbox. The host side (provider.Paths) can root the same
// layout elsewhere; the sidecar reads overrides from the environment.
const (
	// HomeDir is the sandbox user's home.
	HomeDir = "/home/user"
	// WorkspaceDir is where repos are cloned; the sidecar's workspace when it exists.
	WorkspaceDir = HomeDir + "/workspace"
	// StateDir holds the sidecar's state.json and logs/.
	StateDir = "/tmp/proliferate"
	// CaddySnippet is the user snippet the main Caddyfile imports.
	CaddySnippet = HomeDir + "/.proliferate/caddy/user.caddy"
	// Caddyfile is the main Caddyfile.
	Caddyfile = HomeDir + "/Caddyfile"
	// CaddyAdminSocket is the admin socket new images configure.
	CaddyAdminSocket = HomeDir + "/.proliferate/caddy/admin/admin.sock"
	// EnvOverridesFile is read by `proliferate env apply`, deleted by `env scrub`.
	EnvOverridesFile = "/tmp/.proliferate_env.json"
	// PreviewURLFile holds the preview URL for the MCP tool get_preview_url.
	PreviewURLFile = "/tmp/.proliferate_preview_url"
)

// Files of the state dir (StateDir).
const (
	// StateFileName is the state file: {"services":{…},"exposedPort":N}.
	StateFileName = "state.json"
	// StateLockName is the lock every process sharing the state dir takes
	// (flock, exclusive) to change the state file.
	StateLockName = "state.lock"
)
