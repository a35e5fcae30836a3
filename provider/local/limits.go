package local

// Limits of a sandbox: the spec's, with rules' defaults for those it leaves at zero
// (memory, pids, disk; the CPU is not limited by default). Memory, pids and CPU are
// cgroup limits (package cgroup), the disk is a file system of that size (volume.Disks). A limit
// the spec asks for that this machine cannot apply refuses the create with
// engine.ErrLimit; Info.Applied says what holds.

import (
	"fmt"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// limitsFor fills the defaults into l and checks it.
func (e *Engine) limitsFor(l engine.Limits) (engine.Limits, error) {
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUMillis < 0 || l.DiskBytes < 0 {
		return l, fmt.Errorf("limits %+v: negative: %w", l, engine.ErrLimit)
	}
	if e.o.Unisolated && l.DiskBytes > 0 {
		return l, fmt.Errorf("disk of an unisolated sandbox: it writes to the host's directories: %w", engine.ErrLimit)
	}
	if l.MemoryBytes == 0 {
		l.MemoryBytes = rules.DefaultMemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = rules.DefaultPids
	}
	if l.DiskBytes == 0 && !e.o.Unisolated {
		l.DiskBytes = rules.DefaultDiskBytes
	}
	return l, nil
}

// checkApplied refuses when a limit asked for is not what holds.
func checkApplied(asked, applied engine.Limits) error {
	for _, c := range []struct {
		name       string
		ask, holds int64
	}{
		{"memory", asked.MemoryBytes, applied.MemoryBytes},
		{"pids", asked.Pids, applied.Pids},
		{"cpu", asked.CPUMillis, applied.CPUMillis},
	} {
		if c.ask > 0 && c.holds != c.ask {
			return fmt.Errorf("%s limit %d: no usable cgroup controller on this machine: %w", c.name, c.ask, engine.ErrLimit)
		}
	}
	return nil
}
