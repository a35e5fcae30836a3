package proliferate

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/version"
)

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "proliferate <command> <subcommand> [flags]",
		Short: "Manage sandbox services, env files and platform actions",
		Example: `  proliferate services start --name web --command "npm run dev" --ready-tcp 3000 --wait
  proliferate services list
  proliferate actions run --integration github --action list_issues --params '{"repo":"org/web"}'`,
		Long: `proliferate manages the sandbox's services through the sidecar API, writes the
workspace's env files, and runs platform actions through the gateway.

Every command prints one line of JSON on stdout. Errors go to stderr as
"Error: <message>". Exit codes: 0 ok, 1 runtime or HTTP failure, 2 usage error,
130 interrupted (Ctrl-C).

Environment:
` + strings.TrimRight(settingsHelp(), "\n"),
		Version:       version.String(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          groupArgs,
		RunE:          groupRun,

		SuggestionsMinimumDistance: 2,
	}
	root.SetVersionTemplate(`{"version":{{printf "%q" .Version}}}` + "\n")
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.SetIn(f.IO.In)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// A required flag given last with no value is as missing as one not
		// given; an optional one is named as what it is.
		var vre *pflag.ValueRequiredError
		if errors.As(err, &vre) && vre.GetFlag() != nil {
			if name := vre.GetFlag().Name; slices.Contains(requiredFlags(cmd), name) {
				return usageErrorf("Missing required flag: --%s", name)
			}
			return usageErrorf("Missing value for flag: --%s", vre.GetFlag().Name)
		}
		return &usageError{msg: err.Error()}
	})
	root.AddCommand(NewCmdServices(f), NewCmdEnv(f), NewCmdActions(f), NewCmdVersion(f, nil))
	return root
}

// newGroup returns a command that only holds subcommands.
func newGroup(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: groupArgs, RunE: groupRun, SuggestionsMinimumDistance: 2}
}

func groupArgs(*cobra.Command, []string) error { return nil }

// groupRun answers a group called without a known subcommand: a usage error.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return usageErrorf("missing command for %q; run '%s --help'", cmd.CommandPath(), cmd.CommandPath())
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return &usageError{msg: msg}
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("unexpected argument %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// requiredKey is the annotation that lists a command's required flags.
const requiredKey = "proliferate/required-flags"

// required is the Annotations of a command whose flags names are required,
// checked in this order.
func required(names ...string) map[string]string {
	return map[string]string{requiredKey: strings.Join(names, ",")}
}

// requiredFlags lists cmd's required flags.
func requiredFlags(cmd *cobra.Command) []string {
	if s := cmd.Annotations[requiredKey]; s != "" {
		return strings.Split(s, ",")
	}
	return nil
}

// requireFlags reports the first of cmd's required flags that is missing or empty.
func requireFlags(cmd *cobra.Command) error {
	for _, n := range requiredFlags(cmd) {
		fl := cmd.Flags().Lookup(n)
		if fl == nil || fl.Value.String() == "" || (fl.Value.Type() == "stringArray" && fl.Value.String() == "[]") {
			return usageErrorf("Missing required flag: --%s", n)
		}
	}
	return nil
}

// settingsHelp lists the environment the CLI reads, from config.Settings.
func settingsHelp() string {
	var b strings.Builder
	config.WriteSettings(&b, false)
	return b.String()
}
