package rules

// Ports inside a sandbox that both the sidecar and the host side rely on.
const (
	// PortSidecar is the sandbox-mcp API (CONTRACT.md: 0.0.0.0:4000).
	PortSidecar = 4000
	// PortPreview is Caddy's preview site.
	PortPreview = 20000
	// PortPreviewProxy is the sidecar's loopback preview proxy that Caddy routes
	// the preview site to.
	PortPreviewProxy = 4001
	// PortVSCode is openvscode-server, reached only through Caddy.
	PortVSCode = 3901
	// PortOpenCode is OpenCode's HTTP API.
	PortOpenCode = 4096
	// PortSSH is sshd.
	PortSSH = 22
	// PortCaddyAdmin is Caddy's admin API on loopback, where an image configures
	// no admin socket (CaddyAdminSocket).
	PortCaddyAdmin = 2019
	// PortSandboxDaemon is the E2B sandbox daemon, routed by Caddy at the
	// /_proliferate/* paths the sidecar does not serve.
	PortSandboxDaemon = 8470
)

// FallbackPorts are the dev-server ports the preview site tries, in order,
// when no port is exposed (Vite, Next/CRA, Django/Rails-ish, Astro). A new
// slice on every call, so no caller can change another's.
func FallbackPorts() []int { return []int{3000, 5173, 8000, 4321} }
