package proliferate

import (
	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// NewCmdServicesEvents builds `services events`.
func NewCmdServicesEvents(f *Factory, runF func(*ListOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "events",
		Short:   "Follow service state changes",
		Example: "  proliferate services events",
		Long: `Print each service state change as the sidecar streams it (GET /api/events),
one JSON object per line: started, ready, exited (with exitCode), restarting
(with nextRestartAt), stopped, exposed (with port). Runs until Ctrl-C (exit 130).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &ListOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			c, err := f.Sidecar()
			if err != nil {
				return err
			}
			err = c.Stream(o.Ctx, sidecar.EventsPath, func(data []byte) error { return printJSON(f.IO.Out, data) })
			if err != nil && o.Ctx.Err() != nil {
				return &interruptedError{}
			}
			return err
		},
	}
}
