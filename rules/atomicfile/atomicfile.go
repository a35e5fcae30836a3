// Package atomicfile writes files so that readers see the old content or the
// new, never half of either: temp file in the same folder, fsync, rename. The
// sidecar (state, env files, Caddy snippets) and the host side (provider/local)
// both write through it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile writes data to name with mode perm atomically. The folder must
// exist. On failure name is unchanged and no temp file is left behind.
func WriteFile(name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	// CreateTemp makes the file 0600; Chmod (not the umask) decides the mode.
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	// Make the rename itself durable; a failure here cannot undo it, so it is
	// not reported.
	if d, err := os.Open(filepath.Dir(name)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
