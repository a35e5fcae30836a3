// Command sandbox-mcp is the sandbox sidecar: `sandbox-mcp api` serves the HTTP
// API and the terminal WebSocket; `sandbox-mcp mcp` serves the service manager as
// MCP tools over stdio (internal/cli/sandboxmcp). Started under the name
// proliferate (a link or bind of this binary), it is the proliferate CLI.
package main

import (
	"os"

	"github.com/proliferate-ai/sandbox-mcp/internal/cli"
	"github.com/proliferate-ai/sandbox-mcp/internal/cli/sandboxmcp"
)

func main() {
	// The service monitor (this binary re-executed) and the proliferate name.
	cli.Main()
	os.Exit(cli.Exec(sandboxmcp.Run, os.Args[1:]))
}
