package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/grants"
)

// NewCmdActions builds `proliferate actions`.
func NewCmdActions(f *Factory) *cobra.Command {
	cmd := newGroup("actions <command>", "Run platform actions and manage grants through the gateway")
	cmd.Long = `Run platform actions through the gateway at
$PROLIFERATE_GATEWAY_URL/proliferate/$PROLIFERATE_SESSION_ID/actions.`
	grant := newGroup("grant <command>", "Request a grant")
	grant.AddCommand(NewCmdGrantRequest(f, nil))
	grantsCmd := newGroup("grants <command>", "List grants")
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

// NewCmdActionsList builds `actions list`.
func NewCmdActionsList(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the actions available to this session",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &GatewayOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			return gatewayPrint(o, func(c *grants.Client) (json.RawMessage, error) { return c.Available(o.Ctx) })
		},
	}
}

// NewCmdActionsGuide builds `actions guide`.
func NewCmdActionsGuide(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	o := &GatewayOptions{Factory: f}
	cmd := &cobra.Command{
		Use:   "guide --integration I",
		Short: "Print an integration's usage guide",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "integration"); err != nil {
				return err
			}
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			c, err := f.Gateway()
			if err != nil {
				return err
			}
			body, err := c.Guide(o.Ctx, o.Integration)
			if err != nil {
				return err
			}
			var g struct {
				Guide *string `json:"guide"`
			}
			if json.Unmarshal(body, &g) == nil && g.Guide != nil {
				_, err := fmt.Fprintln(f.IO.Out, *g.Guide)
				return err
			}
			return printJSON(f.IO.Out, body)
		},
	}
	cmd.Flags().StringVar(&o.Integration, "integration", "", "integration name (required)")
	return cmd
}

// NewCmdActionsRun builds `actions run`.
func NewCmdActionsRun(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	o := &GatewayOptions{Factory: f}
	var params string
	cmd := &cobra.Command{
		Use:   "run --integration I --action A [--params JSON]",
		Short: "Run an action, waiting for approval when the gateway asks for it",
		Long: `Run an action and print its result. When the action needs a human's approval,
"Waiting for approval..." and the time waited go to stderr while the gateway is
polled every 2 s; Ctrl-C stops waiting (exit 130). A denied, failed or expired
invocation exits 1.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "integration", "action"); err != nil {
				return err
			}
			if params != "" {
				if !json.Valid([]byte(params)) {
					return errors.New("Invalid JSON in --params")
				}
				o.Params = json.RawMessage(params)
			}
			o.Ctx = cmd.Context()
			if runF != nil {
				return runF(o)
			}
			return actionsRun(o)
		},
	}
	cmd.Flags().StringVar(&o.Integration, "integration", "", "integration name (required)")
	cmd.Flags().StringVar(&o.Action, "action", "", "action name (required)")
	cmd.Flags().StringVar(&params, "params", "", "action parameters as a JSON object (default {})")
	return cmd
}

func actionsRun(o *GatewayOptions) error {
	c, err := o.Factory.Gateway()
	if err != nil {
		return err
	}
	w := &approvalWaiter{w: o.Factory.IO.ErrOut, tty: isTerminal(o.Factory.IO.ErrOut)}
	res, err := c.Run(o.Ctx, o.Integration, o.Action, o.Params, w)
	w.done()
	if err != nil {
		if o.Ctx.Err() != nil && errors.Is(err, o.Ctx.Err()) {
			return &interruptedError{msg: fmt.Sprintf("Stopped waiting for approval of invocation %s", w.id)}
		}
		return err
	}
	return printJSON(o.Factory.IO.Out, res)
}

// approvalWaiter shows on stderr that an invocation waits for approval, and
// for how long: a line rewritten in place on a terminal, otherwise a line
// every 10 s so logs stay short.
type approvalWaiter struct {
	w       io.Writer
	tty     bool
	id      string
	last    time.Duration
	inPlace bool
}

func (a *approvalWaiter) Start(id string) {
	a.id = id
	fmt.Fprintln(a.w, "Waiting for approval...")
}

func (a *approvalWaiter) Tick(elapsed time.Duration) {
	elapsed = elapsed.Truncate(time.Second)
	if a.tty {
		fmt.Fprintf(a.w, "\rWaiting for approval... %s elapsed", elapsed)
		a.inPlace = true
		return
	}
	if elapsed-a.last >= 10*time.Second {
		a.last = elapsed
		fmt.Fprintf(a.w, "Still waiting for approval (%s elapsed)\n", elapsed)
	}
}

func (a *approvalWaiter) done() {
	if a.inPlace {
		fmt.Fprintln(a.w)
	}
}

// NewCmdGrantRequest builds `actions grant request`.
func NewCmdGrantRequest(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	o := &GatewayOptions{Factory: f}
	var scope, maxCalls string
	cmd := &cobra.Command{
		Use:   "request --integration I --action A [--scope session|org] [--max-calls N]",
		Short: "Ask for a grant to run an action without approval each time",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd, "integration", "action"); err != nil {
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

// NewCmdGrantsList builds `actions grants list`.
func NewCmdGrantsList(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List this session's grants",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &GatewayOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			return gatewayPrint(o, func(c *grants.Client) (json.RawMessage, error) { return c.ListGrants(o.Ctx) })
		},
	}
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
