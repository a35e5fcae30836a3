package coderun

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// lockSession takes the session's lock file, an exclusive flock(2) of it: across
// processes and between two opens in this one, and it ends when the file is closed
// or its process dies. Without wait, a busy session is (nil, nil).
func (r *Runner) lockSession(id string, wait bool) (func(), error) {
	dir := filepath.Join(r.o.DataDir, "locks")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, volumeName(id)+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock session %s: %w", id, err)
	}
	how := unix.LOCK_EX
	if !wait {
		how |= unix.LOCK_NB
	}
	for {
		if err = unix.Flock(int(f.Fd()), how); err != unix.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("lock session %s: %w", id, err)
	}
	return func() { f.Close() }, nil
}
