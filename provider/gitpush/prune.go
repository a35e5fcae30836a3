package gitpush

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// staleAge is how old a left-over spool file must be before New removes it:
// far past any push in progress.
const staleAge = time.Hour

// oldQuarantineRefs are where an older gitpush fetched bundles before review;
// a crash could leave them, and their objects, behind.
const oldQuarantineRefs = "refs/gitpush/"

// sweepSpool removes the spooled bundles a crash left in the cache dir.
func sweepSpool(dir string) {
	old, _ := filepath.Glob(filepath.Join(dir, "incoming-*.bundle"))
	for _, f := range old {
		if fi, err := os.Lstat(f); err == nil && time.Since(fi.ModTime()) > staleAge {
			_ = os.Remove(f)
		}
	}
}

// prune keeps the mirror at dir within its cap: the old quarantine refs go,
// and a mirror past the cap is garbage-collected (unreachable objects
// dropped at once); a mirror still past it is an error, so one remote cannot
// fill the host's disk. The caller holds the mirror's lock.
func (m *Mirrors) prune(ctx context.Context, dir string) error {
	out, err := m.run(ctx, dir, nil, nil, "for-each-ref", "--format=delete %(refname)", oldQuarantineRefs)
	if err != nil {
		return err
	}
	if len(out) > 0 {
		if _, err := m.run(ctx, dir, nil, strings.NewReader(string(out)), "update-ref", "--stdin"); err != nil {
			return err
		}
	}
	size, err := treeSize(dir)
	if err != nil || size <= m.maxMirror {
		return err
	}
	if _, err := m.run(ctx, dir, nil, nil, "gc", "--quiet", "--prune=now"); err != nil {
		return err
	}
	if size, err = treeSize(dir); err != nil {
		return err
	}
	if size > m.maxMirror {
		return fmt.Errorf("gitpush: the mirror %s is %d bytes, over the %d-byte cap", filepath.Base(dir), size, m.maxMirror)
	}
	return nil
}

// treeSize is the bytes of the regular files under dir.
func treeSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n, err
}
