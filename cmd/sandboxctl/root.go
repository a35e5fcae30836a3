package main

import (
	"github.com/proliferate-ai/sandbox-mcp/internal/version"

	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// newCmdRoot builds the command tree.
func newCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "sandboxctl",
		Short: "Create and drive sandboxes on any provider (local, modal, e2b)",
		Example: "  ID=$(sudo sandboxctl create --repo https://github.com/org/web.git)\n" +
			"  sudo sandboxctl exec \"$ID\" -- proliferate services list\n" +
			"  sudo sandboxctl terminate \"$ID\"",
		Long: "sandboxctl creates sandboxes with the platform's boot plan and drives them:\n" +
			"exec, cp, snapshot, pause/resume, terminate, tunnels and an interactive terminal.\n" +
			"The local provider runs each sandbox in its own Linux namespaces on this machine.",
		Version:           version.String(),
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetVersionTemplate("sandboxctl {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVarP(&f.provider, "provider", "p", "local", "sandbox provider: local, modal or e2b")
	pf.StringVar(&f.dataDir, "data-dir", defaultDataDir(f.getenv), "state of the local engine ($SANDBOXCTL_DATA_DIR)")
	pf.BoolVar(&f.unisolated, "unisolated", false, "local: run sandboxes without namespaces (no isolation)")
	pf.BoolVar(&f.json, "json", false, "print results as JSON")
	pf.BoolVarP(&f.verbose, "verbose", "v", false, "log what happens on stderr")
	root.AddCommand(NewCmdCreate(f, nil), NewCmdList(f, nil), NewCmdExec(f, nil), NewCmdCp(f, nil),
		NewCmdSnapshot(f, nil), NewCmdPause(f, true, nil), NewCmdPause(f, false, nil), NewCmdTerminate(f, nil),
		NewCmdTunnels(f, nil), NewCmdTerminal(f, nil), NewCmdURL(f, nil), NewCmdServe(f, nil), NewCmdPush(f, nil), NewCmdSync(f, nil),
		NewCmdVolume(f, nil), NewCmdCode(f, nil), NewCmdImage(f), NewCmdGateway(f, nil))
	return root
}

// run runs sandboxctl and returns its exit code: 0 ok, 1 failure, 2 usage, or the
// exit code of exec's command.
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newCmdRoot(newFactory(getenv, stdin, stdout, stderr))
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "Error:", errorText(err))
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		return 2
	}
	return 1
}

// isCobraUsage recognizes cobra's own argument errors.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "required flag", "invalid argument"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
