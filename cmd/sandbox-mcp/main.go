// Command sandbox-mcp is the sandbox sidecar: `sandbox-mcp api` serves the HTTP
// API and the terminal WebSocket; `sandbox-mcp mcp` serves the service manager as
// MCP tools over stdio.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/proliferate-ai/sandbox-mcp/internal/services"
)

func main() {
	// The service monitor is this binary re-executed; it must not start the sidecar.
	services.RunMonitorIfRequested()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
