package proliferate

import (
	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/envfiles"
)

// NewCmdEnvScrub builds `env scrub`.
func NewCmdEnvScrub(f *Factory, runF func(*EnvOptions) error) *cobra.Command {
	cmd := envCommand(f, "scrub --spec JSON", "Delete secret env files and the overrides file",
		`Delete the files of entries whose mode is "secret" (missing files are fine),
then the overrides file. Prints {"scrubbed":[paths]}: the spec's path of each
file actually deleted, then the overrides file's path if it was deleted.

`+specHelp, runF, envScrubRun)
	cmd.Example = `  proliferate env scrub --spec '[{"path":".env.local","format":"dotenv","mode":"secret","keys":[{"key":"API_KEY"}]}]'`
	return cmd
}

func envScrubRun(o *EnvOptions) error {
	opts, err := o.options()
	if err != nil {
		return err
	}
	scrubbed, err := envfiles.Scrub(opts, o.Entries)
	if err != nil {
		return envErr(err)
	}
	return printValue(o.Factory.IO.Out, map[string]any{"scrubbed": scrubbed})
}
