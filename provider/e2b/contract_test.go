package e2b_test

import (
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/enginetest"
)

// TestEngineContract runs the engine contract suite on the E2B adapter, over HTTP and
// envd's Connect protocol, against the local E2B server on the isolated local engine
// booting its template base from the test image: the server is tested through the
// contract it serves.
func TestEngineContract(t *testing.T) {
	t.Parallel()
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP, Image: true})
	srv.CheckBootsImage(t)
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		eng, err := e2b.NewEngine(srv.Client(t), e2b.EngineOptions{Template: "base", Timeout: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return eng
	})
}
