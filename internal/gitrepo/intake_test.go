package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/gitbundle"
	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
)

// objectBytes is the size of the files under the repository's objects.
func objectBytes(t *testing.T, repo string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(repo, ".git", "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil && d.Type().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A bundle that fsck, the path rules or the size limits refuse is
// ErrBadBundle, and the repository's objects and refs do not change.
func TestApplyBundleRefusesHostileBundles(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		big   int
	}{
		{"gitmodules URL starting with -", map[string]string{".gitmodules": gittest.BadGitmodules}, 0},
		{".GIT directory", map[string]string{".GIT/config": "[core]\n"}, 0},
		{".git with trailing dot", map[string]string{".git./config": "[core]\n"}, 0},
		{"NTFS 8.3 name beyond fsck's", map[string]string{"git~3/config": "[core]\n"}, 0},
		{"HFS ignorable", map[string]string{".gi\u200dt/hooks/post-checkout": "#!/bin/sh\n"}, 0},
		{"object over the limit", nil, 2 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			upstream := t.TempDir()
			initRepo(t, upstream, map[string]string{"a.txt": "one\n"})
			ws := t.TempDir()
			git(t, ws, "clone", "-q", upstream, ".")
			if tt.big > 0 {
				writeFile(t, filepath.Join(upstream, "big"), strings.Repeat("z", tt.big))
				git(t, upstream, "add", "-A")
				git(t, upstream, "commit", "-qm", "big")
			} else {
				gittest.CommitRaw(t, upstream, "evil", tt.files)
			}
			f := filepath.Join(t.TempDir(), "evil.bundle")
			git(t, upstream, "bundle", "create", "-q", f, "main", "^HEAD~1")
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			w, err := New(Options{Dir: ws, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				BundleLimits: gitbundle.Limits{MaxObjectBytes: 1 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			before, refs := objectBytes(t, ws), git(t, ws, "for-each-ref")
			_, err = w.ApplyBundle(t.Context(), RepoID(ws), bytes.NewReader(data))
			if !errors.Is(err, ErrBadBundle) {
				t.Fatalf("ApplyBundle = %v, want ErrBadBundle", err)
			}
			if got := objectBytes(t, ws); got != before {
				t.Errorf("objects after a refused bundle: %d bytes, want %d", got, before)
			}
			if got := git(t, ws, "for-each-ref"); got != refs {
				t.Errorf("refs after a refused bundle:\n%s\nwant\n%s", got, refs)
			}
		})
	}
}

// Bundle work waits for one of MaxBundleJobs slots within the caller's context.
func TestBundleJobsAreBounded(t *testing.T) {
	ws, _ := bundleRepo(t)
	w, err := New(Options{Dir: ws, MaxBundleJobs: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	release, err := w.bundleSlot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := w.CreateBundle(ctx, RepoID(ws), ""); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("CreateBundle with the only slot taken = %v, want the caller's deadline", err)
	}
	if _, err := w.ApplyBundle(ctx, RepoID(ws), strings.NewReader("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ApplyBundle with the only slot taken = %v, want the caller's deadline", err)
	}
	release()
	f, _, err := w.CreateBundle(t.Context(), RepoID(ws), "")
	if err != nil {
		t.Fatalf("CreateBundle after the slot was freed = %v", err)
	}
	f.Close()
}
