package proliferate

import (
	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/envfiles"
)

// NewCmdEnvApply builds `env apply`.
func NewCmdEnvApply(f *Factory, runF func(*EnvOptions) error) *cobra.Command {
	cmd := envCommand(f, "apply --spec JSON", "Write env files from the overrides file and the environment",
		`Write each entry's env file as KEY=value lines (mode 0600, written atomically;
values with newlines, quotes, '#' or outer spaces are double-quoted and
escaped). Values come from `+config.DefaultEnvOverrides+` (string values) and then
the environment. If any required key is missing, nothing is written and the
exit code is 1. Each path is added once to the repo's .git/info/exclude.
Prints {"applied":[{"path","keyCount"}]}, each path as the spec gave it.

`+specHelp, runF, envApplyRun)
	cmd.Example = `  proliferate env apply --spec '[{"path":".env.local","format":"dotenv","mode":"secret","keys":[{"key":"API_KEY","required":true}]}]'`
	return cmd
}

func envApplyRun(o *EnvOptions) error {
	opts, err := o.options()
	if err != nil {
		return err
	}
	applied, err := envfiles.Apply(opts, o.Entries)
	if err != nil {
		return envErr(err)
	}
	return printValue(o.Factory.IO.Out, map[string]any{"applied": applied})
}
