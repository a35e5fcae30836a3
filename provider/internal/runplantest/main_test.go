package runplantest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// TestMain checks that the three providers and the two servers leave no goroutine
// behind. Idle keep-alive connections of HTTP clients end on their own, and the
// Modal SDK's gRPC connections keep a callback goroutine each (as modalserver's
// tests allow too).
func TestMain(m *testing.M) {
	local.MaybeRunInit()
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}
