package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// BuildCommands compiles the module's commands cmd/<name>, static, into dir: the
// binary of each name is filepath.Join(dir, name). For a TestMain, which owns
// (and removes) dir; tests use Commands.
func BuildCommands(dir string, names ...string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	for _, name := range names {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
	}
	return nil
}

// Commands builds the named commands into a temp dir of t (removed when t
// ends) and returns the dir.
func Commands(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := BuildCommands(dir, names...); err != nil {
		t.Fatal(err)
	}
	return dir
}
