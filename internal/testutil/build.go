package testutil

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/rogpeppe/go-internal/lockedfile"
)

// BuildCommands compiles the module's commands cmd/<name>, static, into dir: the
// binary of each name is filepath.Join(dir, name). For a TestMain, which owns
// (and removes) dir; tests use Commands.
//
// Many test processes build the same commands (every package that starts a sandbox,
// every fuzz worker of such a package), so each is built once into a cache folder of
// this module checkout (CommandCache) and linked or copied into dir from there: go
// build leaves an up-to-date binary as it is, which skips the link, the slow part of
// a build whose packages its cache holds. A file lock makes test processes that
// build at once wait for one build.
func BuildCommands(dir string, names ...string) error {
	root := moduleRoot()
	cache := CommandCache(root)
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return fmt.Errorf("create the command cache: %w", err)
	}
	unlock, err := lockedfile.MutexAt(filepath.Join(cache, ".lock")).Lock()
	if err != nil {
		return fmt.Errorf("lock the command cache %s: %w", cache, err)
	}
	defer unlock()
	for _, name := range names {
		built := filepath.Join(cache, name)
		cmd := exec.Command("go", "build", "-o", built, "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/%s: %v\n%s", name, err, out)
		}
		if err := linkOrCopy(built, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("place the built %s in %s: %w", name, dir, err)
		}
	}
	return nil
}

// CommandCache is the folder BuildCommands keeps the commands of the module checkout
// at root in: one per checkout, so two checkouts never rebuild each other's.
func CommandCache(root string) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(cache, "sandbox-mcp-test", "cmd", hex.EncodeToString(sum[:6]))
}

// moduleRoot is the folder of the module's go.mod.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// linkOrCopy makes dst a hard link of src, or a copy where the two are on different
// file systems. A later build replaces src by a new file, so dst never changes under
// a test that runs it.
func linkOrCopy(src, dst string) error {
	if err := os.Remove(dst); err != nil && !os.IsNotExist(err) {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
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
