package proliferate

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
)

// NewCmdGrantsList builds `actions grants list`.
func NewCmdGrantsList(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List this session's grants",
		Example: "  proliferate actions grants list",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &GatewayOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			return gatewayPrint(o, func(c *grants.Client) (json.RawMessage, error) { return c.ListGrants(o.Ctx) })
		},
	}
}
