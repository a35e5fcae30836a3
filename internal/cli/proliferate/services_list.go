package proliferate

import (
	"context"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// ListOptions are the inputs of `services list`.
type ListOptions struct {
	Ctx     context.Context
	Factory *Factory
}

// NewCmdServicesList builds `services list`.
func NewCmdServicesList(f *Factory, runF func(*ListOptions) error) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List services and the exposed port",
		Example: "  proliferate services list",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o := &ListOptions{Ctx: cmd.Context(), Factory: f}
			if runF != nil {
				return runF(o)
			}
			return listRun(o)
		},
	}
}

func listRun(o *ListOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodGet, sidecar.ServicesPath, nil)
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}
