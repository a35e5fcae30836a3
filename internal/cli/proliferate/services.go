package proliferate

import (
	"errors"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// NewCmdServices builds `proliferate services`.
func NewCmdServices(f *Factory) *cobra.Command {
	cmd := newGroup("services <command>", "Start, stop, expose and follow the sandbox's services")
	cmd.Example = "  proliferate services list\n  proliferate services logs --name web --tail 20"
	cmd.AddCommand(
		NewCmdServicesList(f, nil),
		NewCmdServicesStart(f, nil),
		NewCmdServicesStop(f, nil),
		NewCmdServicesRestart(f, nil),
		NewCmdServicesWait(f, nil),
		NewCmdServicesExpose(f, nil),
		NewCmdServicesLogs(f, nil),
		NewCmdServicesEvents(f, nil),
	)
	return cmd
}

// unsupported reports whether err says the sidecar lacks an endpoint (an old
// sidecar answers an unknown route with a non-JSON 404, or 405/501), as
// opposed to a JSON 404 about the service itself.
func unsupported(err error) bool {
	var ae *sidecar.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Status {
	case http.StatusNotFound:
		return !ae.JSON()
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

func notFound(name string) error { return errors.New(rules.ServiceNotFound(name)) }
