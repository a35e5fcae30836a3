package proliferate

import (
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
)

// NewCmdGrantRequest builds `actions grant request`.
func NewCmdGrantRequest(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	o := &GatewayOptions{Factory: f}
	var scope, maxCalls string
	cmd := &cobra.Command{
		Use:         "request --integration I --action A [--scope session|org] [--max-calls N]",
		Annotations: required("integration", "action"),
		Short:       "Ask for a grant to run an action without approval each time",
		Example: "  proliferate actions grant request --integration github --action list_issues\n" +
			"  proliferate actions grant request --integration slack --action post_message --scope org --max-calls 10",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
				return err
			}
			if cmd.Flags().Changed("max-calls") && maxCalls == "" {
				return usageErrorf("--max-calls must be a positive integer")
			}
			g, err := grants.NewGrantRequest(o.Integration, o.Action, scope, maxCalls)
			if err != nil {
				return usageErrorf("%s", err.Error())
			}
			o.Grant = g
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return gatewayPrint(o, func(c *grants.Client) (json.RawMessage, error) { return c.RequestGrant(o.Ctx, o.Grant) })
		},
	}
	cmd.Flags().StringVar(&o.Integration, "integration", "", "integration name (required)")
	cmd.Flags().StringVar(&o.Action, "action", "", "action name (required)")
	cmd.Flags().StringVar(&scope, "scope", "session", "grant scope: session or org")
	cmd.Flags().StringVar(&maxCalls, "max-calls", "", "number of calls the grant allows (default: unlimited)")
	return cmd
}
