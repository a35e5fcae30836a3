package modal

import (
	"os"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/providertest"
)

// TestLive runs the contract suite, lifecycle included, against real Modal. It needs
// MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (and takes MODAL_APP_NAME, default
// sandbox-mcp-test) and is skipped without them; CI never sets them.
func TestLive(t *testing.T) {
	if os.Getenv("MODAL_TOKEN_ID") == "" || os.Getenv("MODAL_TOKEN_SECRET") == "" {
		t.Skip("MODAL_TOKEN_ID/MODAL_TOKEN_SECRET are not set: the live Modal test is skipped")
	}
	if os.Getenv("MODAL_SERVER_URL") != "" {
		t.Skip("MODAL_SERVER_URL is set: the live test runs against api.modal.com only")
	}
	getenv := func(k string) string {
		if k == "MODAL_APP_NAME" && os.Getenv(k) == "" {
			return "sandbox-mcp-test"
		}
		return os.Getenv(k)
	}
	providertest.Run(t, func(t *testing.T) provider.SandboxProvider {
		return newTestProvider(t, Options{Getenv: getenv}, nil).Provider
	}, providertest.Options{Kind: provider.KindModal, Timeout: 15 * time.Minute,
		CreateOptions: func(t *testing.T) provider.CreateOptions {
			return provider.CreateOptions{SessionID: "live-" + time.Now().Format("20060102-150405"), Repos: []provider.RepoSpec{}}
		}})
}
