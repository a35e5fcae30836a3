package proliferate

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
)

// NewCmdActionsList builds `actions list`.
func NewCmdActionsList(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List the actions available to this session",
		Example: "  proliferate actions list",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &GatewayOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			return gatewayPrint(o, func(c *grants.Client) (json.RawMessage, error) { return c.Available(o.Ctx) })
		},
	}
}
