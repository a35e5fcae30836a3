package cgroup

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine of Make outlives its call.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
