package provider_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// TestMain runs the local engine's hidden modes first: the boot tests on the local
// engine start this binary as the sandboxes' shims and inits.
func TestMain(m *testing.M) {
	local.MaybeRunInit()
	goleak.VerifyTestMain(m)
}
