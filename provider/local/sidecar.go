package local

// The calls the local provider makes to the sandbox-mcp API, through the typed
// client every Go caller shares.

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// sidecarClient is a client for the sandbox's sidecar; the boot waits for the
// sidecar itself, so refused connections are not retried here.
func sidecarClient(c *http.Client, url, token string) (*sidecar.Client, error) {
	return sidecar.New(sidecar.Options{BaseURL: url, Token: token, HTTPClient: c, Retries: -1})
}

// waitSidecar polls the health endpoint until it answers or timeout passes.
func waitSidecar(ctx context.Context, c *http.Client, url string, timeout time.Duration) error {
	cl, err := sidecarClient(c, url, "")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if _, err := cl.Health(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for sandbox-mcp at %s: %w", url, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// startService is POST /api/services, what `proliferate services start` sends.
func startService(ctx context.Context, c *http.Client, url, token string, s provider.ServiceStart) error {
	cl, err := sidecarClient(c, url, token)
	if err != nil {
		return err
	}
	if _, err := cl.StartService(ctx, apitype.StartServiceRequest{Name: s.Name, Command: s.Command, Cwd: s.Cwd}); err != nil {
		return provider.FromError(fmt.Errorf("start service %q: %w", s.Name, err), provider.KindLocal, provider.OpCreateSandbox)
	}
	return nil
}
