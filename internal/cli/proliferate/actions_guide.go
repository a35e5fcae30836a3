package proliferate

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
)

// NewCmdActionsGuide builds `actions guide`.
func NewCmdActionsGuide(f *Factory, runF func(*GatewayOptions) error) *cobra.Command {
	o := &GatewayOptions{Factory: f}
	cmd := &cobra.Command{
		Use:         "guide --integration I",
		Annotations: required("integration"),
		Short:       "Print an integration's usage guide",
		Example:     "  proliferate actions guide --integration github",
		Args:        noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlags(cmd); err != nil {
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
