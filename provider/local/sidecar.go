package local

// The calls the local provider makes to the sandbox-mcp API, over plain net/http.
// Kept in this one file so they can move to a typed client in one place.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/apitype"
)

// sidecarHealthy reports whether GET <url>/api/health answers 200.
func sidecarHealthy(ctx context.Context, c *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/health", nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// waitSidecar polls the health endpoint until it answers or timeout passes.
func waitSidecar(ctx context.Context, c *http.Client, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if sidecarHealthy(ctx, c, url) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for sandbox-mcp at %s: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startService is POST /api/services, what `proliferate services start` sends.
func startService(ctx context.Context, c *http.Client, url, token string, s provider.ServiceStart) error {
	body, _ := json.Marshal(apitype.StartServiceRequest{Name: s.Name, Command: s.Command, Cwd: s.Cwd})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/api/services", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return provider.FromHTTPResponse(resp, provider.KindLocal, provider.OpCreateSandbox)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return nil
}

// listServices is GET /api/services.
func listServices(ctx context.Context, c *http.Client, url, token string) (apitype.ServicesResponse, int, error) {
	var out apitype.ServicesResponse
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/api/services", nil)
	if err != nil {
		return out, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return out, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return out, resp.StatusCode, fmt.Errorf("list services: HTTP %d", resp.StatusCode)
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, resp.StatusCode, err
}
