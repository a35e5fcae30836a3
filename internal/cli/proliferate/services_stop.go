package proliferate

import (
	"context"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// NameOptions are the inputs of the commands that take only --name.
type NameOptions struct {
	Ctx     context.Context
	Factory *Factory
	Name    string
}

// NewCmdServicesStop builds `services stop`.
func NewCmdServicesStop(f *Factory, runF func(*NameOptions) error) *cobra.Command {
	cmd := nameCommand(f, "stop --name N", "Stop a service and its whole process group", runF, stopRun)
	cmd.Example = "  proliferate services stop --name web"
	return cmd
}

func nameCommand(f *Factory, use, short string, runF, def func(*NameOptions) error) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:         use,
		Annotations: required("name"),
		Short:       short,
		Args:        noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
				return err
			}
			o := &NameOptions{Ctx: cmd.Context(), Factory: f, Name: name}
			if runF != nil {
				return runF(o)
			}
			return def(o)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "service name (required)")
	return cmd
}

func stopRun(o *NameOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodDelete, sidecar.ServicePath(o.Name), nil)
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}
