package services

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// A run that ended leaves no descriptor behind in the sidecar: its monitor's
// status pipe is closed once the exit is read.
func TestEndedRunsLeaveNoDescriptors(t *testing.T) {
	m := newTestManager(t, Config{})
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(ents)
	}
	// One run first, so lazily opened descriptors (state lock, watchers) exist.
	warm := func(name string) {
		start(t, m, apitype.StartServiceRequest{Name: name, Command: "true"})
		waitFor(t, name+" to stop", 30*time.Second, func() bool { return get(t, m, name).Status == apitype.StatusStopped })
	}
	warm("warm")
	before := fds()
	const runs = 8
	for i := range runs {
		warm(fmt.Sprintf("run%d", i))
	}
	// Give the supervisor a moment to finish with the last run.
	var after int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if after = fds(); after < before+runs/2 || time.Now().After(deadline) {
			break
		}
	}
	if after >= before+runs/2 {
		t.Errorf("descriptors grew from %d to %d over %d ended runs", before, after, runs)
	}
}
