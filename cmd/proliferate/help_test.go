package main

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files")

// commandPaths lists every command of the tree, the root first.
func commandPaths(c *cobra.Command, prefix []string) [][]string {
	out := [][]string{prefix}
	for _, sub := range c.Commands() {
		if sub.Hidden || sub.Name() == "help" {
			continue
		}
		out = append(out, commandPaths(sub, append(append([]string(nil), prefix...), sub.Name()))...)
	}
	return out
}

func TestHelpGolden(t *testing.T) {
	root := NewCmdRoot(newFactory(func(string) string { return "" }, nil, nil, nil))
	// Cobra adds the completion command when the tree is executed.
	root.InitDefaultCompletionCmd()
	paths := commandPaths(root, nil)
	if len(paths) < 20 {
		t.Fatalf("found %d commands, want every command of the tree", len(paths))
	}
	for _, p := range paths {
		name := "proliferate"
		if len(p) > 0 {
			name += "_" + strings.Join(p, "_")
		}
		t.Run(name, func(t *testing.T) {
			r := cli(t, t.Context(), nil, nil, append(append([]string(nil), p...), "--help")...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("%s --help = %d %q", name, r.code, r.stderr)
			}
			golden(t, filepath.Join("testdata", "help", name+".golden"), r.stdout)
		})
	}
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	testutil.Golden(t, path, []byte(got), *update)
}
