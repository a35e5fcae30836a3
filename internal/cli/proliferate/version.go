package proliferate

import (
	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/version"
)

// NewCmdVersion builds `proliferate version`.
func NewCmdVersion(f *Factory, runF func() error) *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the CLI version (also --version)",
		Example: "  proliferate version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF()
			}
			return printValue(f.IO.Out, map[string]string{"version": version.String()})
		},
	}
}
