package proliferate

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// ExposeOptions are the inputs of `services expose`.
type ExposeOptions struct {
	Ctx     context.Context
	Factory *Factory
	Port    int
}

// NewCmdServicesExpose builds `services expose`.
func NewCmdServicesExpose(f *Factory, runF func(*ExposeOptions) error) *cobra.Command {
	var port string
	cmd := &cobra.Command{
		Use:         "expose --port P",
		Annotations: required("port"),
		Short:       "Route the preview site to a local port",
		Example:     "  proliferate services expose --port 3000",
		Args:        noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
				return err
			}
			p, err := strconv.Atoi(strings.TrimSpace(port))
			if err != nil || p <= 0 || p > 65535 {
				return usageErrorf("--port must be a positive number")
			}
			o := &ExposeOptions{Ctx: cmd.Context(), Factory: f, Port: p}
			if runF != nil {
				return runF(o)
			}
			return exposeRun(o)
		},
	}
	cmd.Flags().StringVar(&port, "port", "", "local port, 1-65535 (required)")
	return cmd
}

func exposeRun(o *ExposeOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodPost, sidecar.ExposePath, map[string]int{"port": o.Port})
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}
