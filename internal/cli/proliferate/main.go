// Package proliferate is the proliferate command, the CLI agents run inside the
// sandbox: it manages services through the sidecar API, writes env files, and runs
// platform actions. cmd/proliferate runs it, and so does any binary that carries it
// as a multi-call binary (internal/cli.Main).
package proliferate

import (
	"context"
	"io"
)

// Run runs proliferate with args (without the program name) and returns its exit
// code.
func Run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	return run(ctx, args, getenv, stdin, stdout, stderr)
}
