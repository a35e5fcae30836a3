// Command sandboxctl is the host-side CLI over any sandbox provider: it creates
// sandboxes (with the boot plan), runs commands in them, copies files, snapshots,
// pauses, terminates, lists tunnels, attaches a terminal to a sidecar, and serves the
// Modal- and E2B-compatible protocols over the local engine.
//
// It is also a multi-call binary (internal/cli): started as sandbox-mcp or
// proliferate it is that command, so a sandboxctl installed alone binds itself into
// sandboxes as their sidecar and CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/proliferate-ai/sandbox-mcp/internal/cli"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

func main() {
	// The local engine's hidden modes (a sandbox's shim and init) come first.
	local.MaybeRunInit()
	cli.Main()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
