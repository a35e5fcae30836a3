package build_test

import (
	"os"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// TestMain runs the local engine's hidden modes (the tests' sandboxes re-execute this
// binary as their shim and init).
func TestMain(m *testing.M) {
	local.MaybeRunInit()
	os.Exit(m.Run())
}
