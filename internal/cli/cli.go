// Package cli makes one binary act as several commands by the name it was started
// under (argv[0]): sandbox-mcp and proliferate. cmd/sandboxctl carries both this way,
// so a sandboxctl installed alone can bind itself into sandboxes as their sidecar
// and CLI; cmd/sandbox-mcp carries proliferate the same way.
package cli

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/proliferate-ai/sandbox-mcp/internal/cli/proliferate"
	"github.com/proliferate-ai/sandbox-mcp/internal/cli/sandboxmcp"
	"github.com/proliferate-ai/sandbox-mcp/internal/services"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Command is a command's entry point: args without the program name, the exit code
// returned.
type Command func(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int

// Commands are the commands a multi-call binary can act as, by program name.
var Commands = map[string]Command{
	filepath.Base(rules.SandboxMCPBin):  sandboxmcp.Run,
	filepath.Base(rules.ProliferateBin): proliferate.Run,
}

// Main runs the command named by argv[0] when it is one of Commands, and then
// exits the process; it returns when the name is another (the binary's own). A
// re-executed service monitor runs first, whatever the name.
func Main() {
	services.RunMonitorIfRequested()
	cmd, ok := Commands[filepath.Base(os.Args[0])]
	if !ok {
		return
	}
	os.Exit(Exec(cmd, os.Args[1:]))
}

// Exec runs cmd with the process's streams and environment under a context that
// ends on SIGINT or SIGTERM, and returns its exit code.
func Exec(cmd Command, args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return cmd(ctx, args, os.Getenv, os.Stdin, os.Stdout, os.Stderr)
}
