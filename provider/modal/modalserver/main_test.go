package modalserver

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// The server's tunnels, exec processes and streams end with Close. The SDK keeps each
// sandbox's command router connection until an idle timer gives it up (its Close does
// not), and a gRPC client connection's callback serializer lives as long as it: those
// client-side goroutines are ignored.
func TestMain(m *testing.M) {
	local.MaybeRunInit()
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}
