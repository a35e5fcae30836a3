package local

// The calls the local provider makes to the sandbox-mcp API go through the typed
// client every Go caller shares.

import (
	"net/http"

	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// sidecarClient is a client for the sandbox's sidecar; the boot waits for the
// sidecar itself, so refused connections are not retried here.
func sidecarClient(c *http.Client, url, token string) (*sidecar.Client, error) {
	return sidecar.New(sidecar.Options{BaseURL: url, Token: token, HTTPClient: c, Retries: -1})
}
