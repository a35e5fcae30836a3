package egress

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the proxy leaves no goroutine behind: a terminated CONNECT's
// server ends with its connection.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
