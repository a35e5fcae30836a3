package provider

import (
	"path"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Fixed layout of a sandbox. Every path below is derived from HomeDir and TmpDir by
// Paths, so a local provider can root the same layout in a temporary directory.
const (
	// HomeDir is the sandbox user's home.
	HomeDir = rules.HomeDir
	// TmpDir is the sandbox's temporary directory (logs, credential and env files).
	TmpDir = "/tmp"
)

// Ports inside the sandbox.
const (
	// PortOpenCode is OpenCode's HTTP API; exposed through a tunnel.
	PortOpenCode = rules.PortOpenCode
	// PortPreview is Caddy's preview proxy; exposed through a tunnel.
	PortPreview = rules.PortPreview
	// PortSSH is sshd (Modal only, raw TCP tunnel).
	PortSSH = rules.PortSSH
	// PortVSCode is openvscode-server, reached only through Caddy.
	PortVSCode = rules.PortVSCode
	// PortSandboxMCP is the sandbox-mcp API, routed by Caddy at /_proliferate/mcp/*.
	PortSandboxMCP = rules.PortSidecar
	// PortSandboxDaemon is the E2B sandbox daemon, routed at other /_proliferate/* paths.
	PortSandboxDaemon = rules.PortSandboxDaemon
	// PortSandboxAgent is the sandbox-agent server of the newer E2B boot split.
	PortSandboxAgent = 2468
)

// Timeouts and sizes of the boot sequence and provider operations.
const (
	// DefaultSandboxTimeout is the sandbox lifetime when SANDBOX_TIMEOUT_SECONDS is unset or invalid.
	DefaultSandboxTimeout = 3600 * time.Second
	// DefaultCapOutput is CapOutput's default limit in bytes.
	DefaultCapOutput = 16 * 1024
	// OpenCodeReadyWait is how long WaitForOpenCodeReady keeps probing.
	OpenCodeReadyWait = 30 * time.Second
	// OpenCodeProbeTimeout bounds one readiness probe.
	OpenCodeProbeTimeout = 5 * time.Second
	// CloneTimeout bounds one git clone attempt.
	CloneTimeout = 120 * time.Second
	// PullTimeout bounds one git pull on restore.
	PullTimeout = 60 * time.Second
	// MkdirTimeout bounds the mkdir helper commands.
	MkdirTimeout = 10 * time.Second
	// CredentialsRemoveTimeout bounds removing the git credentials file.
	CredentialsRemoveTimeout = 5 * time.Second
	// ToolsCopyTimeout bounds copying the preinstalled OpenCode tool dependencies.
	ToolsCopyTimeout = 30 * time.Second
	// StaleKillTimeout bounds killing stale processes after a resume.
	StaleKillTimeout = 10 * time.Second
	// StartServicesTimeout bounds /usr/local/bin/start-services.sh.
	StartServicesTimeout = 30 * time.Second
	// CaddyDirTimeout bounds creating the user Caddy snippet directory.
	CaddyDirTimeout = 5 * time.Second
	// BackgroundProcessTimeout is the lifetime given to long-running background processes.
	BackgroundProcessTimeout = 3600 * time.Second
	// SecretDirTimeout bounds creating a secret file's directory.
	SecretDirTimeout = 30 * time.Second
	// EnvApplyTimeout bounds `proliferate env apply`.
	EnvApplyTimeout = 30 * time.Second
	// ServiceStartTimeout bounds `proliferate services start`.
	ServiceStartTimeout = 60 * time.Second
	// ExecTimeout is execCommand's default timeout.
	ExecTimeout = 30 * time.Second
	// ExecSDKMargin is added to the SDK timeout around a `timeout`-wrapped command.
	ExecSDKMargin = 5 * time.Second
	// TunnelsLookupTimeout bounds the Modal tunnels lookup.
	TunnelsLookupTimeout = 30 * time.Second
)

// Modal sandbox size.
const (
	ModalCPU       = 2
	ModalMemoryMiB = 4096
)

// Paths is the sandbox layout rooted at Home and Tmp. DefaultPaths is the layout of a
// real sandbox; tests and the local provider root it in a directory of their own.
type Paths struct {
	// Home is the sandbox user's home directory.
	Home string
	// Tmp is the temporary directory for logs, credentials and env overrides.
	Tmp string
}

// DefaultPaths is the layout inside a cloud sandbox: /home/user and /tmp.
func DefaultPaths() Paths { return Paths{Home: HomeDir, Tmp: TmpDir} }

// RootedPaths is the layout of a sandbox that lives in dir: dir is the home and dir/tmp the temp dir.
func RootedPaths(dir string) Paths { return Paths{Home: dir, Tmp: path.Join(dir, "tmp")} }

// Workspace is where repos are cloned.
func (p Paths) Workspace() string { return path.Join(p.Home, "workspace") }

// GlobalOpencodeDir is OpenCode's global config directory.
func (p Paths) GlobalOpencodeDir() string { return path.Join(p.Home, ".config/opencode") }

// GlobalPluginDir holds the Proliferate OpenCode plugin.
func (p Paths) GlobalPluginDir() string { return path.Join(p.GlobalOpencodeDir(), "plugin") }

// PluginFile is the plugin module referenced from the OpenCode config.
func (p Paths) PluginFile() string { return path.Join(p.GlobalPluginDir(), "proliferate.mjs") }

// GlobalOpencodeConfig is the global opencode.json.
func (p Paths) GlobalOpencodeConfig() string {
	return path.Join(p.GlobalOpencodeDir(), "opencode.json")
}

// MetadataFile holds SessionMetadata.
func (p Paths) MetadataFile() string { return path.Join(p.Home, ".proliferate/metadata.json") }

// EnvProfileFile is the env profile written on resume.
func (p Paths) EnvProfileFile() string { return path.Join(p.Home, ".env.proliferate") }

// PreinstalledToolsDir holds the image's preinstalled OpenCode tool dependencies.
func (p Paths) PreinstalledToolsDir() string { return path.Join(p.Home, ".opencode-tools") }

// Caddyfile is the main Caddyfile; deliberately not under /tmp.
func (p Paths) Caddyfile() string { return path.Join(p.Home, "Caddyfile") }

// UserCaddyDir holds the user snippet written by port exposure.
func (p Paths) UserCaddyDir() string { return path.Join(p.Home, ".proliferate/caddy") }

// CaddyAdminDir holds Caddy's admin socket; 0700, so only the sandbox user reaches it.
func (p Paths) CaddyAdminDir() string { return path.Join(p.UserCaddyDir(), "admin") }

// CaddyAdminSocket is Caddy's admin endpoint, which sandbox-mcp loads snippets through.
func (p Paths) CaddyAdminSocket() string { return path.Join(p.CaddyAdminDir(), "admin.sock") }

// UserCaddyFile is the snippet the Caddyfile imports.
func (p Paths) UserCaddyFile() string { return path.Join(p.UserCaddyDir(), "user.caddy") }

// GitCredentialsFile is the JSON map read by git-credential-proliferate.
func (p Paths) GitCredentialsFile() string { return path.Join(p.Tmp, ".git-credentials.json") }

// EnvOverrideFile is the env override file merged by WriteEnvFile.
func (p Paths) EnvOverrideFile() string { return path.Join(p.Tmp, ".proliferate_env.json") }

// OpenCodeLog is OpenCode's log file.
func (p Paths) OpenCodeLog() string { return path.Join(p.Tmp, "opencode.log") }

// SandboxMCPLog is the sandbox-mcp API's log file.
func (p Paths) SandboxMCPLog() string { return path.Join(p.Tmp, "sandbox-mcp.log") }

// SandboxDaemonLog is the sandbox daemon's log file.
func (p Paths) SandboxDaemonLog() string { return path.Join(p.Tmp, "sandbox-daemon.log") }

// CaddyLog is Caddy's log file.
func (p Paths) CaddyLog() string { return path.Join(p.Tmp, "caddy.log") }

// SidecarStateDir is the sandbox-mcp service manager's state directory.
func (p Paths) SidecarStateDir() string { return path.Join(p.Tmp, "proliferate") }

// RepoDir is where a repo with the given workspacePath is cloned ("." is the workspace).
func (p Paths) RepoDir(workspacePath string) string {
	if workspacePath == "" || workspacePath == "." {
		return p.Workspace()
	}
	return path.Join(p.Workspace(), workspacePath)
}

// SandboxTimeout parses SANDBOX_TIMEOUT_SECONDS: a finite number > 0 (fractions and
// exponents allowed), else DefaultSandboxTimeout.
func SandboxTimeout(getenv func(string) string) time.Duration {
	s := getenv(EnvSandboxTimeoutSeconds)
	f, ok := parseJSNumber(s)
	if !ok || f <= 0 || f > 1e12 {
		return DefaultSandboxTimeout
	}
	return time.Duration(f * float64(time.Second))
}
