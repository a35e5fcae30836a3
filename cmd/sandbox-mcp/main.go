// Command sandbox-mcp is the sandbox sidecar: `sandbox-mcp api` serves the HTTP
// API and the terminal WebSocket; `sandbox-mcp mcp` serves the service manager as
// MCP tools over stdio.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
