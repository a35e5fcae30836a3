// Package sandboxmcp is the sandbox-mcp command: `sandbox-mcp api` serves the HTTP
// API and the terminal WebSocket; `sandbox-mcp mcp` serves the service manager as
// MCP tools over stdio. cmd/sandbox-mcp runs it, and so does any binary that
// carries it as a multi-call binary (internal/cli.Main).
package sandboxmcp

import (
	"context"
	"io"
)

// Run runs sandbox-mcp with args (without the program name) and returns its exit
// code. The caller must have called services.RunMonitorIfRequested first: the
// service monitor is the running binary re-executed.
func Run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, getenv, stdin, stdout, stderr)
}
