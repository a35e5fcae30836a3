package proliferate

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/internal/clitest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestHelpGolden(t *testing.T) {
	root := NewCmdRoot(newFactory(func(string) string { return "" }, nil, nil, nil))
	// Cobra adds the completion command when the tree is executed.
	root.InitDefaultCompletionCmd()
	paths := clitest.CommandPaths(root, nil)
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

// Every required flag, whether left out or given last without a value, is
// reported as missing (exit 2); the commands that have required flags are
// the ones the contract names.
func TestRequiredFlags(t *testing.T) {
	root := NewCmdRoot(newFactory(func(string) string { return "" }, nil, nil, nil))
	got := map[string][]string{}
	for _, p := range clitest.CommandPaths(root, nil) {
		cmd, _, err := root.Find(p)
		if err != nil {
			t.Fatal(err)
		}
		names := requiredFlags(cmd)
		if len(names) == 0 {
			continue
		}
		got[strings.Join(p, " ")] = names
		for _, n := range names {
			if cmd.Flags().Lookup(n) == nil {
				t.Errorf("%q requires --%s, which it does not define", p, n)
				continue
			}
			want := "Error: Missing required flag: --" + n + "\n"
			r := cli(t, t.Context(), nil, nil, append(append([]string(nil), p...), "--"+n)...)
			if r.code != 2 || r.stderr != want {
				t.Errorf("%q --%s (no value) = %d %q, want 2 %q", p, n, r.code, r.stderr, want)
			}
		}
		r := cli(t, t.Context(), nil, nil, p...)
		if want := "Error: Missing required flag: --" + names[0] + "\n"; r.code != 2 || r.stderr != want {
			t.Errorf("%q without flags = %d %q, want 2 %q", p, r.code, r.stderr, want)
		}
	}
	want := map[string][]string{
		"services start": {"name", "command"}, "services stop": {"name"}, "services restart": {"name"},
		"services wait": {"name"}, "services expose": {"port"}, "services logs": {"name"},
		"env apply": {"spec"}, "env scrub": {"spec"},
		"actions guide": {"integration"}, "actions run": {"integration", "action"},
		"actions grant request": {"integration", "action"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("required flags (-want +got):\n%s", d)
	}
}

// TestEveryCommandHasAnExample walks the command tree: every command, groups
// and the root included, shows an example that runs proliferate. Cobra's own
// completion commands are left as cobra writes them.
func TestEveryCommandHasAnExample(t *testing.T) {
	root := NewCmdRoot(newFactory(func(string) string { return "" }, nil, nil, nil))
	paths := clitest.CommandPaths(root, nil)
	if len(paths) < 20 {
		t.Fatalf("found %d commands, want every command of the tree", len(paths))
	}
	for _, p := range paths {
		cmd, _, err := root.Find(p)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.Join(append([]string{"proliferate"}, p...), " ")
		if cmd.Example == "" {
			t.Errorf("%s has no example in its help", name)
			continue
		}
		for _, line := range strings.Split(cmd.Example, "\n") {
			if !strings.HasPrefix(line, "  proliferate ") {
				t.Errorf("%s: example line %q, want it indented and running proliferate", name, line)
			}
		}
	}
}
