package proliferate

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/envfiles"

	"os"

	"fmt"
)

// NewCmdEnv builds `proliferate env`.
func NewCmdEnv(f *Factory) *cobra.Command {
	cmd := newGroup("env <command>", "Write or remove the workspace's env files")
	cmd.Example = "  proliferate env apply --spec '[{\"path\":\".env.local\",\"format\":\"dotenv\",\"mode\":\"secret\",\"keys\":[{\"key\":\"API_KEY\"}]}]'"
	cmd.AddCommand(NewCmdEnvApply(f, nil), NewCmdEnvScrub(f, nil))
	return cmd
}

// EnvOptions are the inputs of `env apply` and `env scrub`.
type EnvOptions struct {
	Factory *Factory
	Entries []envfiles.Entry
}

const specHelp = `--spec is a JSON array of
  {"workspacePath": ".", "path": ".env.local", "format": "dotenv", "mode": "secret",
   "keys": [{"key": "API_KEY", "required": true}]}
workspacePath ("." or empty = the workspace: $WORKSPACE_DIR, else
/home/user/workspace when it exists, else the current directory) and path are
relative; absolute paths, ".." and paths that leave the workspace are usage
errors (exit 2).`

func envCommand(f *Factory, use, short, long string, runF, def func(*EnvOptions) error) *cobra.Command {
	var spec string
	cmd := &cobra.Command{
		Use:         use,
		Annotations: required("spec"),
		Short:       short,
		Long:        long,
		Args:        noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
				return err
			}
			entries, err := envfiles.ParseSpec(spec)
			if err != nil {
				return envErr(err)
			}
			o := &EnvOptions{Factory: f, Entries: entries}
			if runF != nil {
				return runF(o)
			}
			return def(o)
		},
	}
	cmd.Flags().StringVar(&spec, "spec", "", "JSON array of env file entries (required)")
	return cmd
}

// envErr turns envfiles' usage errors into exit code 2.
func envErr(err error) error {
	var ue *envfiles.UsageError
	if errors.As(err, &ue) {
		return &usageError{msg: ue.Msg}
	}
	return err
}

func (o *EnvOptions) options() (envfiles.Options, error) {
	overrides := o.Factory.OverridesFile
	if overrides == "" {
		overrides = config.DefaultEnvOverrides
	}
	cwd, err := os.Getwd()
	if err != nil {
		return envfiles.Options{}, fmt.Errorf("find the working directory: %w", err)
	}
	ws, err := config.EnvWorkspaceDir(o.Factory.Getenv, cwd)
	if err != nil {
		return envfiles.Options{}, err
	}
	return envfiles.Options{Workspace: ws, OverridesFile: overrides, Getenv: o.Factory.Getenv}, nil
}
