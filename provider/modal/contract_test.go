package modal

import (
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/enginetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestEngineContract runs the engine contract suite on the Modal adapter, through the
// Modal SDK and real gRPC, against the local Modal server on the isolated local engine:
// the server is tested through the contract it serves. The adapter's image is a bare
// debian:bookworm-slim, which the server boots from the shared test store's base (its
// Builder), never from the engine's default root: checked first.
func TestEngineContract(t *testing.T) {
	host := modaltest.NewImageEngine(t, local.EngineOptions{})
	srv, env := imageServer(t, host)
	_, base := imagetest.Base(t)
	enginetest.Run(t, func(t *testing.T) engine.Engine {
		e := newProvider(t, env).Engine()
		e.o.TLS = srv.TLSConfig()
		e.image = BaseImage{Def: image.Image{From: imagetest.BaseRef}}
		in, err := e.Create(t.Context(), engine.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Terminate(t.Context(), in.ID)
		checkImageRoot(t, host, base, func(argv []string) (string, error) {
			return execOut(t.Context(), e, in.ID, argv)
		})
		return e
	})
}
