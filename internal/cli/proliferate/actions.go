package proliferate

import (
	"context"
	"encoding/json"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
)

// NewCmdActions builds `proliferate actions`.
func NewCmdActions(f *Factory) *cobra.Command {
	cmd := newGroup("actions <command>", "Run platform actions and manage grants through the gateway")
	cmd.Long = `Run platform actions through the gateway at
$PROLIFERATE_GATEWAY_URL/proliferate/$PROLIFERATE_SESSION_ID/actions.`
	cmd.Example = "  proliferate actions list\n  proliferate actions run --integration github --action list_issues"
	grant := newGroup("grant <command>", "Request a grant")
	grant.Example = "  proliferate actions grant request --integration github --action list_issues"
	grant.AddCommand(NewCmdGrantRequest(f, nil))
	grantsCmd := newGroup("grants <command>", "List grants")
	grantsCmd.Example = "  proliferate actions grants list"
	grantsCmd.AddCommand(NewCmdGrantsList(f, nil))
	cmd.AddCommand(NewCmdActionsList(f, nil), NewCmdActionsGuide(f, nil), NewCmdActionsRun(f, nil), grant, grantsCmd)
	return cmd
}

// GatewayOptions are the inputs of the gateway commands.
type GatewayOptions struct {
	Ctx         context.Context
	Factory     *Factory
	Integration string
	Action      string
	Params      json.RawMessage
	Grant       grants.GrantRequest
}

// gatewayPrint runs call against the gateway and prints its answer.
func gatewayPrint(o *GatewayOptions, call func(*grants.Client) (json.RawMessage, error)) error {
	c, err := o.Factory.Gateway()
	if err != nil {
		return err
	}
	body, err := call(c)
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}
