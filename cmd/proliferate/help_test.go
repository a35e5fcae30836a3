package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/cobra"
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
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update): %v", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s (-want +got):\n%s", path, d)
	}
}
