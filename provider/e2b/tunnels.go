package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// resolve builds the result of a running sandbox from its tunnels, without booting.
func (p *Provider) resolve(ctx context.Context, id string) (provider.CreateResult, error) {
	res := provider.CreateResult{SandboxID: id}
	var err error
	if res.TunnelURL, err = p.tunnel(ctx, id, provider.PortOpenCode); err != nil {
		return res, err
	}
	if res.PreviewURL, err = p.tunnel(ctx, id, provider.PortPreview); err != nil {
		return res, err
	}
	if res.SandboxMCPURL, err = p.tunnel(ctx, id, provider.PortSandboxMCP); err != nil {
		return res, err
	}
	return res, nil
}

// tunnel is the URL of a port of a sandbox.
func (p *Provider) tunnel(ctx context.Context, id string, port int) (string, error) {
	if p.o.LocalTunnels {
		return p.client.PortURL(ctx, id, port)
	}
	return "https://" + Host(id, port, p.client.Domain()), nil
}

// Sidecar returns the URL of a sandbox's sandbox-mcp API and its token (read from the
// sandbox's environment). It connects, so a paused sandbox is resumed.
func (p *Provider) Sidecar(ctx context.Context, sandboxID string) (url, token string, err error) {
	if err := p.ready(provider.OpResolveTunnels); err != nil {
		return "", "", err
	}
	e, err := p.envd(ctx, sandboxID)
	if err != nil {
		return "", "", p.fail(provider.OpResolveTunnels, err)
	}
	r, err := e.Run(ctx, `printf %s "$`+provider.EnvSandboxMCPAuthToken+`"`, RunOptions{Timeout: 30 * time.Second})
	if err != nil {
		return "", "", p.fail(provider.OpResolveTunnels, err)
	}
	url, err = p.tunnel(ctx, sandboxID, provider.PortSandboxMCP)
	if err != nil {
		return "", "", p.fail(provider.OpResolveTunnels, err)
	}
	return url, r.Stdout, nil
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
