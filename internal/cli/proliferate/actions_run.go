package proliferate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// NewCmdActionsRun builds `actions run`.
func NewCmdActionsRun(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	o := &GatewayOptions{Factory: f}
	var params string
	cmd := &cobra.Command{
		Use:         "run --integration I --action A [--params JSON]",
		Annotations: required("integration", "action"),
		Short:       "Run an action, waiting for approval when the gateway asks for it",
		Example: `  proliferate actions run --integration github --action list_issues
  proliferate actions run --integration slack --action post_message --params '{"channel":"#dev","text":"deployed"}'`,
		Long: `Run an action and print its result. When the action needs a human's approval,
"Waiting for approval..." and the time waited go to stderr while the gateway is
polled every 2 s; Ctrl-C stops waiting (exit 130). A denied, failed or expired
invocation exits 1.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
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
