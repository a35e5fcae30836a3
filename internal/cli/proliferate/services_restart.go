package proliferate

import (
	"context"
	"errors"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// NewCmdServicesRestart builds `services restart`.
func NewCmdServicesRestart(f *Factory, runF func(*NameOptions) error) *cobra.Command {
	cmd := nameCommand(f, "restart --name N", "Restart a service with the same command, cwd and options", runF, restartRun)
	cmd.Example = "  proliferate services restart --name web"
	return cmd
}

func restartRun(o *NameOptions) error {
	c, err := o.Factory.Sidecar()
	if err != nil {
		return err
	}
	body, err := c.Do(o.Ctx, http.MethodPost, sidecar.RestartPath(o.Name), nil)
	if err == nil {
		return printJSON(o.Factory.IO.Out, body)
	}
	if !unsupported(err) {
		return err
	}
	// An old sidecar: look the service up, stop it, start it again.
	svc, _, err := lookupService(o.Ctx, c, o.Name)
	if err != nil {
		return err
	}
	if _, err := c.Do(o.Ctx, http.MethodDelete, sidecar.ServicePath(o.Name), nil); err != nil {
		return err
	}
	body, err = c.Do(o.Ctx, http.MethodPost, sidecar.ServicesPath, svc.StartRequest())
	if err != nil {
		return err
	}
	return printJSON(o.Factory.IO.Out, body)
}

// lookupService finds one service with GET /api/services/{name}, or in the
// list when the sidecar is too old for that route; fromList is then true.
// Unknown is `Service "N" not found`.
func lookupService(ctx context.Context, c *sidecar.Client, name string) (svc apitype.ServiceInfo, fromList bool, err error) {
	svc, err = c.GetService(ctx, name)
	if err == nil {
		return svc, false, nil
	}
	var ae *sidecar.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.JSON() {
		return svc, false, notFound(name)
	}
	if !unsupported(err) {
		return svc, false, err
	}
	svc, err = findInList(ctx, c, name)
	return svc, true, err
}

// findInList finds one service in GET /api/services; unknown is
// `Service "N" not found`.
func findInList(ctx context.Context, c *sidecar.Client, name string) (apitype.ServiceInfo, error) {
	list, err := c.ListServices(ctx)
	if err != nil {
		return apitype.ServiceInfo{}, err
	}
	for _, s := range list.Services {
		if s.Name == name {
			return s, nil
		}
	}
	return apitype.ServiceInfo{}, notFound(name)
}
