package provider

import (
	"fmt"
	"strconv"

	"github.com/proliferate-ai/sandbox-mcp/caddyfile"
)

// caddyPreviewAddr is where sandbox-mcp's preview proxy listens (its default).
var caddyPreviewAddr = caddyfile.DefaultPreview

// caddyMainOptions are the main Caddyfile's settings for a sandbox laid out as p.
func caddyMainOptions(p Paths) caddyfile.MainOptions {
	local := func(port int) string { return "localhost:" + strconv.Itoa(port) }
	return caddyfile.MainOptions{
		Site:        ":" + strconv.Itoa(PortPreview),
		AdminSocket: p.CaddyAdminSocket(),
		API:         local(PortSandboxMCP),
		VSCode:      local(PortVSCode),
		Daemon:      local(PortSandboxDaemon),
		SnippetPath: p.UserCaddyFile(),
		Preview:     caddyPreviewAddr,
	}
}

// defaultCaddyfile is the main Caddyfile of a sandbox, from package caddyfile's
// generator: /_proliferate/mcp/* to sandbox-mcp, /_proliferate/vscode/* to
// openvscode-server behind forward_auth, other /_proliferate/* paths to the
// sandbox daemon, the user snippet, then the preview proxy with the dev-server
// ports behind it; the admin endpoint is a unix socket, so exposing a port
// never needs a reload.
func defaultCaddyfile(p Paths) (string, error) {
	b, err := caddyfile.RenderMain(caddyMainOptions(p))
	if err != nil {
		return "", fmt.Errorf("render caddyfile: %w", err)
	}
	return string(b), nil
}

// defaultSnippet is the user snippet the sandbox boots with: the route that
// sandbox-mcp itself writes. Never empty: Caddy 2.6 refuses a 0-byte import.
func defaultSnippet() (string, error) {
	b, err := caddyfile.Snippet{Preview: caddyPreviewAddr}.Render()
	if err != nil {
		return "", fmt.Errorf("render caddy snippet: %w", err)
	}
	return string(b), nil
}
