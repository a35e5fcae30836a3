package gitrepo

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Finding 12.5: a path of many components is checked in linear time and
// one longer than MaxPathBytes is refused before anything is resolved.
func TestResolvePathBounds(t *testing.T) {
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(repo, "d", "f"), "x")
	for _, l := range [][2]string{{"loop1", "loop2"}, {"loop2", "loop1"}, {"self", "self"}, {"up", "../" + filepath.Base(repo) + "/d"}} {
		if err := os.Symlink(l[1], filepath.Join(repo, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	deep := strings.Repeat("a/", MaxPathBytes/2-1) + "b" // 4095 bytes, 2048 components
	tests := []struct {
		path string
		want error
	}{
		{deep, nil},
		{"d/" + deep[2:], nil},
		{strings.Repeat("d/./e/../", 455), nil}, // 4095 bytes of walking in place
		{deep + "/c", ErrPathTooLong},
		{strings.Repeat("x", MaxPathBytes+1), ErrPathTooLong},
		{"d/f/below/a/file", nil}, // below a file: does not exist
		{"loop1/x", ErrInvalidPath},
		{"self", ErrInvalidPath},
		{"up/f", nil}, // leaves and re-enters the repository
		{"up/../../..", ErrInvalidPath},
	}
	for _, tt := range tests {
		_, err := resolvePath(repo, tt.path)
		if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("resolvePath(%d bytes %.40q…) = %v, want %v", len(tt.path), tt.path, err, tt.want)
		}
	}
}

// BenchmarkResolvePathDeep: a 4 KiB path of 2,048 components.
func BenchmarkResolvePathDeep(b *testing.B) {
	repo := b.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, strings.Repeat("a/", 200)), 0o755); err != nil {
		b.Fatal(err)
	}
	deep := strings.Repeat("a/", MaxPathBytes/2-1) + "b"
	for b.Loop() {
		if _, err := resolvePath(repo, deep); err != nil {
			b.Fatal(err)
		}
	}
}

// Request-scoped cancellation: when the caller goes away, git and what it
// started are killed at once, not at the timeout.
func TestDiffCancelKillsGit(t *testing.T) {
	ws := t.TempDir()
	initRepo(t, ws, map[string]string{"a": "a"})
	pidFile := filepath.Join(t.TempDir(), "pids")
	fake := filepath.Join(t.TempDir(), "git")
	writeFile(t, fake, "#!/bin/sh\nsleep 300 &\necho $! >> "+pidFile+"\necho $$ >> "+pidFile+"\nwait\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Dir: ws, Git: fake, Timeout: time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := w.Diff(ctx, RepoID(ws), "a")
		errc <- err
	}()
	var pids []int
	deadline := time.Now().Add(20 * time.Second)
	for len(pids) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("fake git did not start")
		}
		time.Sleep(5 * time.Millisecond)
		b, _ := os.ReadFile(pidFile)
		pids = pids[:0]
		for _, f := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
	}
	cancel()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Diff after cancel = %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Diff did not return after its context was cancelled")
	}
	if !errors.Is(ErrPathTooLong, ErrInvalidPath) {
		t.Errorf("ErrPathTooLong is not an ErrInvalidPath")
	}
	// Killed processes may linger a moment as zombies until reaped.
	deadline = time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d of the cancelled git is still running", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// gone reports whether pid has exited (a zombie has).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z")
}
