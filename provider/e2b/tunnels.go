package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// EnvLocalTunnels, when "1" or "true", makes the engine ask the local server
// (e2bserver) for the URL of a sandbox port instead of building <port>-<id>.<domain>.
const EnvLocalTunnels = provider.EnvE2BLocalTunnels

// PortURL is the URL of a port of a sandbox: https://<port>-<id>.<domain> on E2B, or
// what the local server answers with EngineOptions.LocalTunnels.
func (e *Engine) PortURL(ctx context.Context, id string, port int) (string, error) {
	if e.o.LocalTunnels {
		u, err := e.c.PortURL(ctx, id, port)
		return u, engineErr(err)
	}
	return "https://" + Host(id, port, e.c.Domain()), nil
}

// PortURL asks the local server (e2bserver) for a URL that reaches port inside the
// sandbox. It is not part of E2B's API.
func (c *Client) PortURL(ctx context.Context, id string, port int) (string, error) {
	var out struct {
		URL string `json:"url"`
	}
	_, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/sandboxes/%s/ports/%d", url.PathEscape(id), port), nil, nil, &out)
	if err == nil && out.URL == "" {
		err = errors.New("port mapping answer has no url")
	}
	return out.URL, err
}
