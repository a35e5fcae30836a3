package modal

import (
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/enginetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestEngineContract runs the engine contract suite on the Modal adapter, through the
// Modal SDK and real gRPC, against the local Modal server on the isolated local engine:
// the server is tested through the contract it serves.
func TestEngineContract(t *testing.T) {
	host := modaltest.Engine(t, local.EngineOptions{})
	srv, env := localServer(t, host)
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		e := newProvider(t, env).Engine()
		e.TLS = srv.TLSConfig()
		e.p.image = BaseImage{Def: image.Image{From: "debian:bookworm-slim"}}
		return e
	})
}
