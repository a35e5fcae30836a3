package coderun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/lockedfile"
	"golang.org/x/sys/unix"
)

// lockSession takes the session's lock file; without wait, a busy session is
// (nil, nil). Waiting is lockedfile's (the lock the rest of the runner's files use).
// lockedfile has no non-blocking form, so the try takes the same lock itself: on the
// systems this runs on, lockedfile's lock is flock(2) of the file, which a LOCK_NB
// flock of another open of the same file conflicts with exactly, in this process and
// across processes; both end when the file is closed, or its process dies.
func (r *Runner) lockSession(id string, wait bool) (func(), error) {
	dir := filepath.Join(r.o.DataDir, "locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	name := filepath.Join(dir, volumeName(id)+".lock")
	if wait {
		lf, err := lockedfile.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock session %s: %w", id, err)
		}
		return func() { lf.Close() }, nil
	}
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock session %s: %w", id, err)
	}
	if err := tryFlock(f); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock session %s: %w", id, err)
	}
	return func() { f.Close() }, nil
}

// tryFlock takes f's exclusive flock without waiting (EWOULDBLOCK when held).
func tryFlock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err != unix.EINTR {
			return err
		}
	}
}
