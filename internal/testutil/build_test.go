package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCommandsShareOneBuild(t *testing.T) {
	a := Commands(t, "proliferate")
	b := Commands(t, "proliferate")
	for _, dir := range []string{a, b} {
		bin := filepath.Join(dir, "proliferate")
		out, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "proliferate") {
			t.Fatalf("%s --help = %v:\n%s", bin, err, out)
		}
	}
	// Removing one test's copy leaves the cache's and the other test's as they are.
	if err := os.Remove(filepath.Join(a, "proliferate")); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{filepath.Join(b, "proliferate"), filepath.Join(CommandCache(moduleRoot()), "proliferate")} {
		if fi, err := os.Stat(bin); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("stat %s = %v, %v; want an executable file", bin, fi, err)
		}
	}
}

func TestCommandCacheOnePerCheckout(t *testing.T) {
	if a, b := CommandCache("/src/one"), CommandCache("/src/two"); a == b {
		t.Errorf("CommandCache(/src/one) = CommandCache(/src/two) = %s, want two folders", a)
	}
	if a, b := CommandCache("/src/one"), CommandCache("/src/one"); a != b {
		t.Errorf("CommandCache(/src/one) = %s, then %s; want one folder", a, b)
	}
}

// BenchmarkCommands compares a test's build of sandbox-mcp from the command cache
// (go build finds the binary up to date and links nothing) with a build into a fresh
// folder, which links it anew every time, as every test process did before the cache.
func BenchmarkCommands(b *testing.B) {
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			if err := BuildCommands(b.TempDir(), "sandbox-mcp"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fresh", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command("go", "build", "-o", filepath.Join(b.TempDir(), "sandbox-mcp"), "./cmd/sandbox-mcp")
			cmd.Dir = moduleRoot()
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("go build: %v\n%s", err, out)
			}
		}
	})
}
