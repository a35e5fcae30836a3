// Package clitest holds the test helpers the cobra command trees of sandboxctl
// and proliferate share: gh-style option parsing with a recording runF, and the
// walk over a tree's commands that help goldens and required-flag checks use.
package clitest

import (
	"bytes"
	"testing"

	"github.com/spf13/cobra"
)

// Parse runs the command newCmd builds (given a recording runF) on args and
// returns the options runF saw (nil when the command never got that far) and
// the command's error. The command must write nothing before runF: newCmd
// gets the buffers to give its factory, and anything written to them, or to
// the command's own outputs, fails the test.
func Parse[T any](t testing.TB, newCmd func(out, errOut *bytes.Buffer, runF func(*T) error) *cobra.Command, args ...string) (*T, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	var got *T
	cmd := newCmd(&out, &errOut, func(o *T) error { got = o; return nil })
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	err := cmd.ExecuteContext(t.Context())
	if out.Len() > 0 || errOut.Len() > 0 {
		t.Errorf("%q wrote stdout %q, stderr %q; want nothing before runF", args, out.String(), errOut.String())
	}
	return got, err
}

// CommandPaths lists every visible command of the tree under c as its path of
// names, c itself (prefix) first; cobra's own help command is left out.
func CommandPaths(c *cobra.Command, prefix []string) [][]string {
	out := [][]string{prefix}
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Name() == "help" {
			continue
		}
		out = append(out, CommandPaths(sub, append(append([]string(nil), prefix...), sub.Name()))...)
	}
	return out
}
