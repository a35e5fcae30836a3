package deploy

import (
	"flag"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
)

var update = flag.Bool("update", false, "rewrite deploy/Dockerfile from provider/image.Default")

// TestDockerfileIsGenerated: deploy/Dockerfile is the output of `sandboxctl image
// dockerfile`, byte for byte (go test ./deploy -update rewrites it).
func TestDockerfileIsGenerated(t *testing.T) {
	testutil.Golden(t, "Dockerfile", []byte(image.Default().Dockerfile()), *update)
}
