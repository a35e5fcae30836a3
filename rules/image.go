package rules

// The folders the sandbox image creates (provider/image's default image; its account is
// UserName). provider.Paths spells the same folders for the host side; a test in
// provider/image keeps the two equal.
const (
	// BinDir is where the image's own static binaries (sandbox-mcp, proliferate) live.
	BinDir = "/usr/local/bin"
	// GlobalPluginDir holds the Proliferate OpenCode plugin.
	GlobalPluginDir = HomeDir + "/.config/opencode/plugin"
	// PreinstalledToolsDir holds the image's preinstalled OpenCode tool dependencies.
	PreinstalledToolsDir = HomeDir + "/.opencode-tools"
	// CaddyAdminDir is the folder of CaddyAdminSocket (0700: only UserName reaches it).
	CaddyAdminDir = HomeDir + "/.proliferate/caddy/admin"
)
