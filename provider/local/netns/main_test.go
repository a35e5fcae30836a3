package netns

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine of Do, Dial or ServeTunnel outlives
// its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
