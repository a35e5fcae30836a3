package modalserver

import (
	"context"
	"testing"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// BenchmarkExecRoundTrip is one `true` through the SDK: exec start, stdout read to
// EOF and wait, over real gRPC to the server and into the isolated local engine's
// sandbox (created once, so namespace setup is not in the loop).
func BenchmarkExecRoundTrip(b *testing.B) {
	eng := modaltest.Engine(b, local.EngineOptions{})
	url, _ := startServer(b, eng)
	sdkEnv(b, url, true)
	c := newSDK(b)
	ctx := context.Background()
	app, err := c.Apps.FromName(ctx, "bench", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Terminate(ctx, nil)
	b.ResetTimer()
	for b.Loop() {
		p, err := sb.Exec(ctx, []string{"true"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if code, err := p.Wait(ctx, nil); err != nil || code != 0 {
			b.Fatalf("wait = %d, %v", code, err)
		}
	}
}
