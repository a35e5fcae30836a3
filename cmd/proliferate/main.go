// Command proliferate is the CLI agents run inside the sandbox: it manages
// services through the sidecar API, writes env files, and runs platform actions
// (internal/cli/proliferate).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/proliferate-ai/sandbox-mcp/internal/cli/proliferate"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := proliferate.Run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
