package gitrepo

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

func TestMain(m *testing.M) {
	// Tests must not depend on the machine's git configuration.
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "Test",
		"GIT_AUTHOR_EMAIL":    "test@example.com",
		"GIT_COMMITTER_NAME":  "Test",
		"GIT_COMMITTER_EMAIL": "test@example.com",
	} {
		os.Setenv(k, v)
	}
	goleak.VerifyTestMain(m)
}

// git runs git in dir for test set-up and fails the test on error.
func git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// initRepo makes a repository at dir with one commit holding files.
func initRepo(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, dir, "init", "-q", "-b", "main")
	if len(files) == 0 {
		return
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "initial")
}

func newWorkspace(t testing.TB, dir string) *Workspace {
	t.Helper()
	w, err := New(Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("New(%q): %v", dir, err)
	}
	return w
}

func paths(repos []apitype.GitRepo) []string {
	var ps []string
	for _, r := range repos {
		ps = append(ps, r.Path)
	}
	return ps
}

func TestRepos(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	initRepo(t, ws, nil)                                       // the workspace itself
	initRepo(t, filepath.Join(ws, "apps", "web"), nil)         // depth 2
	initRepo(t, filepath.Join(ws, "a", "b", "c"), nil)         // depth 3
	initRepo(t, filepath.Join(ws, "a", "b", "c", "d"), nil)    // depth 4: too deep
	initRepo(t, filepath.Join(ws, "node_modules", "dep"), nil) // skipped tree
	initRepo(t, filepath.Join(ws, "x", "node_modules", "y"), nil)
	initRepo(t, filepath.Join(outside, "elsewhere"), nil)
	if err := os.Symlink(filepath.Join(outside, "elsewhere"), filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	// A linked worktree has a .git file.
	initRepo(t, filepath.Join(ws, "main"), map[string]string{"f": "1"})
	git(t, filepath.Join(ws, "main"), "worktree", "add", "-q", filepath.Join(ws, "wt"))

	w := newWorkspace(t, ws)
	repos, err := w.Repos(t.Context())
	if err != nil {
		t.Fatalf("Repos: %v", err)
	}
	want := []string{ws, filepath.Join(ws, "a", "b", "c"), filepath.Join(ws, "apps", "web"), filepath.Join(ws, "main"), filepath.Join(ws, "wt")}
	if diff := cmp.Diff(want, paths(repos)); diff != "" {
		t.Errorf("Repos() paths mismatch (-want +got):\n%s", diff)
	}
	for _, r := range repos {
		b, err := base64.StdEncoding.DecodeString(r.ID)
		if err != nil || string(b) != r.Path {
			t.Errorf("repo %q has id %q, want base64 of its path", r.Path, r.ID)
		}
		if _, err := w.Status(t.Context(), r.ID); err != nil {
			t.Errorf("Status(id of %q) = %v, want no error", r.Path, err)
		}
	}
}

func TestReposEmptyWorkspace(t *testing.T) {
	repos, err := newWorkspace(t, t.TempDir()).Repos(t.Context())
	if err != nil || repos == nil || len(repos) != 0 {
		t.Fatalf("Repos() = %v, %v; want an empty non-nil list", repos, err)
	}
}

func TestInvalidRepoIDs(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	initRepo(t, filepath.Join(ws, "proj"), map[string]string{"a": "1"})
	initRepo(t, outside, map[string]string{"a": "1"})
	initRepo(t, filepath.Join(ws, "node_modules", "dep"), nil)
	initRepo(t, filepath.Join(ws, "a", "b", "c", "d"), nil)
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(ws, "plain"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t, ws)
	tests := []struct{ name, id string }{
		{"empty", ""},
		{"garbage", "!!!not base64!!!"},
		{"relative path", RepoID("proj")},
		{"outside", RepoID(outside)},
		{"root", RepoID("/")},
		{"dot-dot escape", RepoID(ws + "/proj/../..")},
		{"symlink out", RepoID(filepath.Join(ws, "out"))},
		{"not a repo", RepoID(filepath.Join(ws, "plain"))},
		{"missing", RepoID(filepath.Join(ws, "missing"))},
		{"in node_modules", RepoID(filepath.Join(ws, "node_modules", "dep"))},
		{"too deep", RepoID(filepath.Join(ws, "a", "b", "c", "d"))},
		{"NUL", RepoID(filepath.Join(ws, "proj") + "\x00")},
		{"git dir", RepoID(filepath.Join(ws, "proj", ".git"))},
	}
	for _, tt := range tests {
		if _, err := w.Status(t.Context(), tt.id); !errors.Is(err, ErrInvalidRepo) {
			t.Errorf("Status(%q) [%s] error = %v, want ErrInvalidRepo", tt.id, tt.name, err)
		}
		if _, err := w.Diff(t.Context(), tt.id, ""); !errors.Is(err, ErrInvalidRepo) {
			t.Errorf("Diff(%q) [%s] error = %v, want ErrInvalidRepo", tt.id, tt.name, err)
		}
	}
	// Lenient forms of a valid id still work.
	p := filepath.Join(ws, "proj")
	for _, id := range []string{
		RepoID(p),
		strings.TrimRight(RepoID(p), "="),
		strings.ReplaceAll(RepoID(p), "+", " "),
		RepoID(p + "/"),
	} {
		if _, err := w.Status(t.Context(), id); err != nil {
			t.Errorf("Status(%q) error = %v, want none", id, err)
		}
	}
}

func TestStatus(t *testing.T) {
	ws := t.TempDir()
	remote := filepath.Join(t.TempDir(), "remote.git")
	git(t, ws, "init", "-q", "--bare", "-b", "main", remote)
	repo := filepath.Join(ws, "repo")
	initRepo(t, repo, map[string]string{
		"modified.txt": "one\n",
		"staged.txt":   "one\n",
		"old name.txt": "rename me, with enough content to be detected as a rename\n",
		"deleted.txt":  "bye\n",
		"keep.txt":     "k\n",
	})
	git(t, repo, "remote", "add", "origin", remote)
	git(t, repo, "push", "-q", "-u", "origin", "main")
	// Behind by one: a commit on the remote that is fetched but not merged.
	other := filepath.Join(t.TempDir(), "other")
	git(t, ws, "clone", "-q", remote, other)
	writeFile(t, filepath.Join(other, "remote.txt"), "r\n")
	git(t, other, "add", "-A")
	git(t, other, "commit", "-q", "-m", "remote")
	git(t, other, "push", "-q")
	git(t, repo, "fetch", "-q")
	// Ahead by two.
	for i := range 2 {
		writeFile(t, filepath.Join(repo, "keep.txt"), fmt.Sprint(i))
		git(t, repo, "commit", "-q", "-am", "local")
	}

	writeFile(t, filepath.Join(repo, "modified.txt"), "two\n")
	writeFile(t, filepath.Join(repo, "staged.txt"), "two\n")
	git(t, repo, "add", "staged.txt")
	git(t, repo, "mv", "old name.txt", "new name.txt")
	git(t, repo, "rm", "-q", "deleted.txt")
	writeFile(t, filepath.Join(repo, "untracked file.txt"), "u\n")
	writeFile(t, filepath.Join(repo, "new\nline.txt"), "n\n")
	writeFile(t, filepath.Join(repo, "tab\tand ünïcödé.txt"), "x\n")

	w := newWorkspace(t, ws)
	got, err := w.Status(t.Context(), RepoID(repo))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	want := apitype.GitStatusResponse{Branch: "main", Ahead: 2, Behind: 1, Files: []apitype.GitFile{
		{Status: "D.", Path: "deleted.txt"},
		{Status: ".M", Path: "modified.txt"},
		{Status: "R.", Path: "new name.txt"},
		{Status: "M.", Path: "staged.txt"},
		{Status: "?", Path: "new\nline.txt"},
		{Status: "?", Path: "tab\tand ünïcödé.txt"},
		{Status: "?", Path: "untracked file.txt"},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Status() mismatch (-want +got):\n%s", diff)
	}
}

func TestStatusNoCommits(t *testing.T) {
	ws := t.TempDir()
	initRepo(t, ws, nil)
	writeFile(t, filepath.Join(ws, "a"), "a")
	got, err := newWorkspace(t, ws).Status(t.Context(), RepoID(ws))
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	want := apitype.GitStatusResponse{Branch: "main", Files: []apitype.GitFile{{Status: "?", Path: "a"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Status() mismatch (-want +got):\n%s", diff)
	}
}

func TestDiff(t *testing.T) {
	ws := t.TempDir()
	repo := filepath.Join(ws, "repo")
	initRepo(t, repo, map[string]string{"a.txt": "a\n", "dir/b.txt": "b\n", "gone.txt": "g\n"})
	writeFile(t, filepath.Join(repo, "a.txt"), "a2\n")
	writeFile(t, filepath.Join(repo, "dir/b.txt"), "b2\n")
	if err := os.Remove(filepath.Join(repo, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t, ws)
	id := RepoID(repo)

	all, err := w.Diff(t.Context(), id, "")
	if err != nil {
		t.Fatalf("Diff(all): %v", err)
	}
	for _, s := range []string{"+a2", "+b2", "-g"} {
		if !strings.Contains(all, s) {
			t.Errorf("Diff(all) = %q, want it to contain %q", all, s)
		}
	}
	one, err := w.Diff(t.Context(), id, "dir/b.txt")
	if err != nil {
		t.Fatalf("Diff(dir/b.txt): %v", err)
	}
	if !strings.Contains(one, "+b2") || strings.Contains(one, "+a2") {
		t.Errorf("Diff(dir/b.txt) = %q, want only b.txt's change", one)
	}
	gone, err := w.Diff(t.Context(), id, "gone.txt")
	if err != nil || !strings.Contains(gone, "-g") {
		t.Errorf("Diff(gone.txt) = %q, %v; want the deletion", gone, err)
	}
	// Staged changes count too: the diff is against HEAD.
	git(t, repo, "add", "a.txt")
	if d, err := w.Diff(t.Context(), id, "a.txt"); err != nil || !strings.Contains(d, "+a2") {
		t.Errorf("Diff(staged a.txt) = %q, %v; want the staged change", d, err)
	}
	// Pathspec magic is taken literally.
	if d, err := w.Diff(t.Context(), id, ":(top)*"); err != nil || d != "" {
		t.Errorf("Diff(%q) = %q, %v; want an empty diff", ":(top)*", d, err)
	}
}

func TestDiffInvalidPaths(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	repo := filepath.Join(ws, "repo")
	initRepo(t, repo, map[string]string{"a": "a\n"})
	writeFile(t, filepath.Join(outside, "secret"), "s")
	if err := os.Symlink(outside, filepath.Join(repo, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(repo, "secret")); err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t, ws)
	for _, p := range []string{
		"../../etc/passwd", "..", "../repo/a", "/etc/passwd", repo + "/a",
		"out/secret", "out", "secret", "out/missing/file", "a\x00b",
	} {
		if d, err := w.Diff(t.Context(), RepoID(repo), p); !errors.Is(err, ErrInvalidPath) {
			t.Errorf("Diff(path %q) = %q, %v; want ErrInvalidPath", p, d, err)
		}
	}
	for _, p := range []string{"a", "./a", "sub/../a", "missing/dir/file", "."} {
		if _, err := w.Diff(t.Context(), RepoID(repo), p); err != nil {
			t.Errorf("Diff(path %q) error = %v, want none", p, err)
		}
	}
}

func TestDiffTruncated(t *testing.T) {
	ws := t.TempDir()
	initRepo(t, ws, map[string]string{"big.txt": "x\n"})
	var b strings.Builder
	for b.Len() < 300<<10 {
		fmt.Fprintf(&b, "line %d of a large change that makes a large diff\n", b.Len())
	}
	writeFile(t, filepath.Join(ws, "big.txt"), b.String())
	d, err := newWorkspace(t, ws).Diff(t.Context(), RepoID(ws), "")
	if err != nil {
		t.Fatalf("Diff: %v", err)
	}
	if !strings.HasSuffix(d, TruncatedMarker) {
		t.Fatalf("Diff() ends with %q, want the truncation marker", d[len(d)-40:])
	}
	if n := len(d) - len(TruncatedMarker); n != DefaultMaxDiffBytes {
		t.Errorf("Diff() has %d bytes before the marker, want %d", n, DefaultMaxDiffBytes)
	}
}

func TestDiffUTF8Cut(t *testing.T) {
	ws := t.TempDir()
	initRepo(t, ws, map[string]string{"u.txt": "x\n"})
	writeFile(t, filepath.Join(ws, "u.txt"), strings.Repeat("é", 4000)+"\n")
	w, err := New(Options{Dir: ws, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxDiffBytes: 1001})
	if err != nil {
		t.Fatal(err)
	}
	// Whatever the offset of the cut, the result is valid UTF-8.
	for _, max := range []int{1000, 1001} {
		w.maxDiff = max
		d, err := w.Diff(t.Context(), RepoID(ws), "")
		if err != nil {
			t.Fatalf("Diff: %v", err)
		}
		if !strings.HasSuffix(d, TruncatedMarker) || !isValidUTF8(d) {
			t.Errorf("Diff() with cap %d = …%q, want valid UTF-8 ending in the marker", max, d[len(d)-30:])
		}
	}
}

func isValidUTF8(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s && !strings.ContainsRune(s, '\uFFFD')
}

func TestDiffNoCommits(t *testing.T) {
	ws := t.TempDir()
	initRepo(t, ws, nil)
	writeFile(t, filepath.Join(ws, "a.txt"), "a\n")
	git(t, ws, "add", "a.txt")
	writeFile(t, filepath.Join(ws, "a.txt"), "a\nb\n")
	w := newWorkspace(t, ws)
	d, err := w.Diff(t.Context(), RepoID(ws), "")
	if err != nil {
		t.Fatalf("Diff in a repo with no commits: %v", err)
	}
	if !strings.Contains(d, "+b") {
		t.Errorf("Diff() = %q, want the unstaged change", d)
	}
	if d, err := w.Diff(t.Context(), RepoID(ws), "a.txt"); err != nil || !strings.Contains(d, "+b") {
		t.Errorf("Diff(a.txt) = %q, %v; want the unstaged change", d, err)
	}
}

func TestGitTimeout(t *testing.T) {
	ws := t.TempDir()
	initRepo(t, ws, map[string]string{"a": "a"})
	// A fake git that hangs, with a child holding stdout open.
	fake := filepath.Join(t.TempDir(), "git")
	writeFile(t, fake, "#!/bin/sh\nsleep 30 &\nsleep 30\n")
	if err := os.Chmod(fake, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := New(Options{Dir: ws, Git: fake, Timeout: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.Status(t.Context(), RepoID(ws))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Status with a hanging git = %v, want a deadline error", err)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	file := filepath.Join(t.TempDir(), "f")
	writeFile(t, file, "")
	for _, opts := range []Options{
		{Dir: t.TempDir()},
		{Logger: log},
		{Dir: "/does/not/exist", Logger: log},
		{Dir: file, Logger: log},
		{Dir: t.TempDir(), Logger: log, Git: "/does/not/exist/git"},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("New(%+v) = nil error, want one", opts)
		}
	}
}

func TestWorkspaceBehindSymlink(t *testing.T) {
	real := t.TempDir()
	initRepo(t, filepath.Join(real, "proj"), map[string]string{"a": "a\n"})
	link := filepath.Join(t.TempDir(), "workspace")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t, link)
	repos, err := w.Repos(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{filepath.Join(link, "proj")}, paths(repos)); diff != "" {
		t.Fatalf("Repos() through a symlinked workspace (-want +got):\n%s", diff)
	}
	// Both the listed path and the real path name the repository.
	for _, p := range []string{filepath.Join(link, "proj"), filepath.Join(real, "proj")} {
		if _, err := w.Status(t.Context(), RepoID(p)); err != nil {
			t.Errorf("Status(%q) = %v, want no error", p, err)
		}
	}
}

// FuzzResolve: ids and paths from callers never panic, and whatever is
// accepted stays inside the workspace and the repository.
func FuzzResolve(f *testing.F) {
	ws := f.TempDir()
	outside := f.TempDir()
	initRepo(f, filepath.Join(ws, "repo"), nil)
	initRepo(f, outside, nil)
	if err := os.Symlink(outside, filepath.Join(ws, "repo", "out")); err != nil {
		f.Fatal(err)
	}
	// Links the linear path walk must follow: a loop, a way up and back in,
	// an absolute one out.
	for name, target := range map[string]string{"loop": "loop", "up": "../repo", "abs": "/etc"} {
		if err := os.Symlink(target, filepath.Join(ws, "repo", name)); err != nil {
			f.Fatal(err)
		}
	}
	w := newWorkspace(f, ws)
	f.Add(RepoID(filepath.Join(ws, "repo")), "a.txt")
	f.Add(RepoID(filepath.Join(ws, "repo")), "up/up/loop/x")
	f.Add(RepoID(filepath.Join(ws, "repo")), "up/../abs/passwd")
	f.Add(RepoID(outside), "../../etc/passwd")
	f.Add("!!", "out/x")
	f.Add(RepoID(filepath.Join(ws, "repo", "out")), "/etc/passwd")
	f.Fuzz(func(t *testing.T, id, path string) {
		repo, err := w.resolveRepo(id)
		if err != nil {
			if !errors.Is(err, ErrInvalidRepo) {
				t.Fatalf("resolveRepo(%q) = %v, want ErrInvalidRepo", id, err)
			}
			return
		}
		if _, ok := within(w.realDir, repo); !ok || !hasGit(repo) {
			t.Fatalf("resolveRepo(%q) = %q, outside the workspace or not a repository", id, repo)
		}
		clean, err := resolvePath(repo, path)
		if err != nil {
			return
		}
		full := filepath.Join(repo, clean)
		if _, ok := within(repo, full); !ok {
			t.Fatalf("resolvePath(%q, %q) = %q, outside the repository", repo, path, clean)
		}
		if real, err := filepath.EvalSymlinks(full); err == nil {
			if _, ok := within(repo, real); !ok {
				t.Fatalf("resolvePath(%q, %q) = %q, which resolves to %q outside", repo, path, clean, real)
			}
		}
	})
}

func TestConcurrentCalls(t *testing.T) {
	ws := t.TempDir()
	initRepo(t, ws, map[string]string{"a": "a\n"})
	writeFile(t, filepath.Join(ws, "a"), "b\n")
	w, err := New(Options{Dir: ws, MaxProcs: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 20)
	for i := range 20 {
		go func() {
			if i%2 == 0 {
				_, err := w.Status(t.Context(), RepoID(ws))
				errs <- err
			} else {
				_, err := w.Diff(t.Context(), RepoID(ws), "a")
				errs <- err
			}
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent call: %v", err)
		}
	}
	// Waiting for a slot within the caller's context: gitexec.TestMaxProcsWaitsWithinContext.
}
