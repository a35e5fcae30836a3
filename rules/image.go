package rules

// The sandbox image's account and the folders it creates (provider/image's default
// image). provider.Paths spells the same folders for the host side; a test in
// provider/image keeps the two equal.
const (
	// SandboxUser is the unprivileged account of the sandbox image.
	SandboxUser = "user"
	// SandboxUID is SandboxUser's uid and gid.
	SandboxUID = 1000
	// BinDir is where the image's own static binaries (sandbox-mcp, proliferate) live.
	BinDir = "/usr/local/bin"
	// GlobalPluginDir holds the Proliferate OpenCode plugin.
	GlobalPluginDir = HomeDir + "/.config/opencode/plugin"
	// PreinstalledToolsDir holds the image's preinstalled OpenCode tool dependencies.
	PreinstalledToolsDir = HomeDir + "/.opencode-tools"
	// CaddyAdminDir is the folder of CaddyAdminSocket (0700: only SandboxUser reaches it).
	CaddyAdminDir = HomeDir + "/.proliferate/caddy/admin"
)
