package gitrepo

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// bundleRepo makes a repo with a base commit and two more on main, returning
// the repo dir and the base commit.
func bundleRepo(t *testing.T) (string, string) {
	t.Helper()
	ws := t.TempDir()
	initRepo(t, ws, map[string]string{"a.txt": "one\n", "old.txt": "rename me\n"})
	base := strings.TrimSpace(git(t, ws, "rev-parse", "HEAD"))
	writeFile(t, filepath.Join(ws, "a.txt"), "two\n")
	git(t, ws, "commit", "-qam", "second")
	git(t, ws, "mv", "old.txt", "new.txt")
	if err := os.WriteFile(filepath.Join(ws, "bin.dat"), []byte{0, 1, 2, 0, 0xff}, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, ws, "add", "-A")
	git(t, ws, "commit", "-qm", "third: rename and binary")
	return ws, base
}

func readAll(t *testing.T, b io.Reader) []byte {
	t.Helper()
	data, err := io.ReadAll(b)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestCreateBundleSinceBase(t *testing.T) {
	ws, base := bundleRepo(t)
	w := newWorkspace(t, ws)
	b, info, err := w.CreateBundle(t.Context(), RepoID(ws), base)
	if err != nil {
		t.Fatal(err)
	}
	// The file is unlinked before it is handed out: nothing to clean up.
	if _, err := os.Stat(b.Name()); !os.IsNotExist(err) {
		t.Errorf("bundle file %s still in the file system", b.Name())
	}
	data := readAll(t, b)
	if info.Branch != "refs/heads/main" || int64(len(data)) != info.Size {
		t.Errorf("bundle branch %q size %d (read %d), want refs/heads/main and equal sizes", info.Branch, info.Size, len(data))
	}
	b.Close()
	// Unbundle into a clone at base: the branch tip arrives.
	clone := t.TempDir()
	git(t, clone, "clone", "-q", ws, ".")
	git(t, clone, "reset", "-q", "--hard", base)
	f := filepath.Join(t.TempDir(), "x.bundle")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := git(t, clone, "bundle", "verify", f)
	if !strings.Contains(out, base) {
		t.Errorf("bundle verify does not list base %s as prerequisite:\n%s", base, out)
	}
	git(t, clone, "fetch", "-q", f, "refs/heads/main:refs/remotes/b/main")
	if got, want := git(t, clone, "rev-parse", "b/main"), git(t, ws, "rev-parse", "HEAD"); got != want {
		t.Errorf("fetched tip %s, want %s", got, want)
	}
}

func TestCreateBundleFullAndErrors(t *testing.T) {
	ws, base := bundleRepo(t)
	w := newWorkspace(t, ws)
	b, _, err := w.CreateBundle(t.Context(), RepoID(ws), "")
	if err != nil {
		t.Fatal(err)
	}
	data := readAll(t, b)
	b.Close()
	if !bytes.HasPrefix(data, []byte("# v2 git bundle\n")) && !bytes.HasPrefix(data, []byte("# v3 git bundle\n")) {
		t.Errorf("full bundle starts %q", data[:min(20, len(data))])
	}
	head := strings.TrimSpace(git(t, ws, "rev-parse", "HEAD"))
	tests := []struct {
		name, base string
		want       error
	}{
		{"option", "--all", ErrBadRevision},
		{"range", base + "..HEAD", ErrBadRevision},
		{"unknown", "nope", ErrBadRevision},
		{"space", "HEAD ~1", ErrBadRevision},
		{"head itself", head, ErrNothingNew},
		{"descendant named", "main", ErrNothingNew},
	}
	for _, tt := range tests {
		_, _, err := w.CreateBundle(t.Context(), RepoID(ws), tt.base)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: CreateBundle(%q) = %v, want %v", tt.name, tt.base, err, tt.want)
		}
	}
	if _, _, err := w.CreateBundle(t.Context(), RepoID("/etc"), ""); !errors.Is(err, ErrInvalidRepo) {
		t.Errorf("CreateBundle(/etc) = %v, want ErrInvalidRepo", err)
	}
	git(t, ws, "checkout", "-q", "--detach")
	if _, _, err := w.CreateBundle(t.Context(), RepoID(ws), ""); !errors.Is(err, ErrNoBranch) {
		t.Errorf("CreateBundle on detached HEAD = %v, want ErrNoBranch", err)
	}
}

func TestCreateBundleTooLarge(t *testing.T) {
	ws, _ := bundleRepo(t)
	w, err := New(Options{Dir: ws, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBundleBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = w.CreateBundle(t.Context(), RepoID(ws), "")
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Limit != 100 {
		t.Fatalf("CreateBundle past 100 bytes = %v, want *TooLargeError{100}", err)
	}
	if _, err := w.ApplyBundle(t.Context(), RepoID(ws), bytes.NewReader(make([]byte, 101))); !errors.As(err, &tl) {
		t.Fatalf("ApplyBundle of 101 bytes = %v, want *TooLargeError", err)
	}
}

func TestApplyBundleMovesOnlyRemoteRefs(t *testing.T) {
	upstream, _ := bundleRepo(t)
	ws := t.TempDir()
	git(t, ws, "clone", "-q", upstream, ".")
	git(t, ws, "reset", "-q", "--hard", "HEAD~1")
	git(t, ws, "update-ref", "refs/remotes/origin/main", "HEAD")
	localMain := git(t, ws, "rev-parse", "main")
	// The upstream advances; a bundle of it is applied to ws.
	writeFile(t, filepath.Join(upstream, "c.txt"), "three\n")
	git(t, upstream, "add", "-A")
	git(t, upstream, "commit", "-qm", "fourth")
	git(t, upstream, "tag", "v1")
	f := filepath.Join(t.TempDir(), "u.bundle")
	git(t, upstream, "bundle", "create", "-q", f, "main", "v1", "^HEAD~2")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t, ws)
	up, err := w.ApplyBundle(t.Context(), RepoID(ws), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	newTip := strings.TrimSpace(git(t, upstream, "rev-parse", "HEAD"))
	want := []apitype.GitRefUpdate{{Ref: "refs/remotes/origin/main", Old: strings.TrimSpace(localMain), New: newTip}}
	if d := cmp.Diff(want, up); d != "" {
		t.Errorf("ApplyBundle updates (-want +got):\n%s", d)
	}
	if got := git(t, ws, "rev-parse", "main"); got != localMain {
		t.Errorf("local main moved to %s", got)
	}
	if out := git(t, ws, "tag", "-l"); out != "" {
		t.Errorf("tags arrived: %q", out)
	}
	// Garbage and a bundle whose prerequisites are missing are ErrBadBundle.
	if _, err := w.ApplyBundle(t.Context(), RepoID(ws), strings.NewReader("not a bundle")); !errors.Is(err, ErrBadBundle) {
		t.Errorf("ApplyBundle(garbage) = %v, want ErrBadBundle", err)
	}
	other := t.TempDir()
	initRepo(t, other, map[string]string{"x": "1"})
	writeFile(t, filepath.Join(other, "x"), "2")
	git(t, other, "commit", "-qam", "2")
	g := filepath.Join(t.TempDir(), "o.bundle")
	git(t, other, "bundle", "create", "-q", g, "main", "^HEAD~1")
	data, _ = os.ReadFile(g)
	if _, err := w.ApplyBundle(t.Context(), RepoID(ws), bytes.NewReader(data)); !errors.Is(err, ErrBadBundle) {
		t.Errorf("ApplyBundle(missing prerequisite) = %v, want ErrBadBundle", err)
	}
}

func TestChangeset(t *testing.T) {
	ws, base := bundleRepo(t)
	w := newWorkspace(t, ws)
	cs, err := w.Changeset(t.Context(), RepoID(ws), base)
	if err != nil {
		t.Fatal(err)
	}
	if cs.Base != base || cs.Branch != "refs/heads/main" || cs.Head != strings.TrimSpace(git(t, ws, "rev-parse", "HEAD")) {
		t.Errorf("changeset base/branch/head = %s %s %s", cs.Base, cs.Branch, cs.Head)
	}
	var subjects []string
	for _, c := range cs.Commits {
		subjects = append(subjects, c.Subject)
		if c.Author != "Test <test@example.com>" || len(c.SHA) < 40 {
			t.Errorf("commit %+v: bad author or sha", c)
		}
	}
	if d := cmp.Diff([]string{"third: rename and binary", "second"}, subjects); d != "" {
		t.Errorf("subjects (-want +got):\n%s", d)
	}
	want := []apitype.GitChangedFile{
		{Path: "a.txt", Status: "M", OldMode: "100644", Mode: "100644", Size: 4},
		{Path: "bin.dat", Status: "A", Mode: "100755", Binary: true, Size: 5},
		{Path: "new.txt", OldPath: "old.txt", Status: "R", OldMode: "100644", Mode: "100644", Size: 10},
	}
	if d := cmp.Diff(want, cs.Files); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	if _, err := w.Changeset(t.Context(), RepoID(ws), "-x"); !errors.Is(err, ErrBadRevision) {
		t.Errorf("Changeset(-x) = %v, want ErrBadRevision", err)
	}
}

func TestParseRawDiff(t *testing.T) {
	z40 := strings.Repeat("0", 40)
	a40 := strings.Repeat("a", 40)
	b40 := strings.Repeat("b", 40)
	tests := []struct {
		name     string
		in       string
		want     []apitype.GitChangedFile
		wantSHAs []string
		wantErr  bool
	}{
		{"empty", "", []apitype.GitChangedFile{}, nil, false},
		{"added", ":000000 100644 " + z40 + " " + a40 + " A\x00f\x00",
			[]apitype.GitChangedFile{{Path: "f", Status: "A", Mode: "100644"}}, []string{a40}, false},
		{"deleted", ":100644 000000 " + a40 + " " + z40 + " D\x00f\x00",
			[]apitype.GitChangedFile{{Path: "f", Status: "D", OldMode: "100644"}}, []string{""}, false},
		{"rename", ":100644 100644 " + a40 + " " + b40 + " R087\x00o\x00n\x00",
			[]apitype.GitChangedFile{{Path: "n", OldPath: "o", Status: "R", OldMode: "100644", Mode: "100644"}}, []string{b40}, false},
		{"submodule", ":160000 160000 " + a40 + " " + b40 + " M\x00sub\x00",
			[]apitype.GitChangedFile{{Path: "sub", Status: "M", OldMode: "160000", Mode: "160000"}}, []string{""}, false},
		{"no colon", "100644 100644 " + a40 + " " + b40 + " M\x00f\x00", nil, nil, true},
		{"no path", ":100644 100644 " + a40 + " " + b40 + " M\x00", nil, nil, true},
		{"rename one path", ":100644 100644 " + a40 + " " + b40 + " R100\x00o\x00", nil, nil, true},
		{"bad sha", ":100644 100644 xyz " + b40 + " M\x00f\x00", nil, nil, true},
		{"empty path", ":100644 100644 " + a40 + " " + b40 + " M\x00\x00", nil, nil, true},
	}
	for _, tt := range tests {
		got, shas, err := ParseRawDiff([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", tt.name, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("%s: files (-want +got):\n%s", tt.name, d)
		}
		if d := cmp.Diff(tt.wantSHAs, shas); d != "" {
			t.Errorf("%s: shas (-want +got):\n%s", tt.name, d)
		}
	}
}

func TestParseNumstat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]bool
		wantErr bool
	}{
		{"empty", "", map[string]bool{}, false},
		{"text", "1\t2\tf\x00", map[string]bool{}, false},
		{"binary", "-\t-\tb\x00", map[string]bool{"b": true}, false},
		{"binary rename", "-\t-\t\x00o\x00n\x00", map[string]bool{"n": true}, false},
		{"rename cut", "-\t-\t\x00o\x00", nil, true},
		{"no tabs", "garbage\x00", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseNumstat([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err = %v, wantErr %v", tt.name, err, tt.wantErr)
			continue
		}
		if !tt.wantErr {
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("%s (-want +got):\n%s", tt.name, d)
			}
		}
	}
}

func TestParseLog(t *testing.T) {
	a40 := strings.Repeat("a", 40)
	got, err := ParseLog([]byte(a40 + "\x1fsubj\x1fN <e>\x00\n" + a40 + "\x1f\x1fM <f>\x00"))
	if err != nil {
		t.Fatal(err)
	}
	want := []apitype.GitCommit{{SHA: a40, Subject: "subj", Author: "N <e>"}, {SHA: a40, Author: "M <f>"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseLog (-want +got):\n%s", d)
	}
	for _, bad := range []string{"zz\x1fa\x1fb\x00", a40 + "\x1fonly two\x00"} {
		if _, err := ParseLog([]byte(bad)); err == nil {
			t.Errorf("ParseLog(%q) = nil error", bad)
		}
	}
}

func FuzzParseRawDiff(f *testing.F) {
	a40 := strings.Repeat("a", 40)
	f.Add([]byte(":100644 100644 " + a40 + " " + a40 + " R087\x00o\x00n\x00"))
	f.Add([]byte(":000000 100644 " + a40 + " " + a40 + " A\x00f\x00"))
	f.Add([]byte("-\t-\t\x00o\x00n\x00"))
	f.Fuzz(func(t *testing.T, in []byte) {
		files, shas, err := ParseRawDiff(in)
		if err == nil && len(files) != len(shas) {
			t.Fatalf("%d files but %d shas", len(files), len(shas))
		}
		for _, f := range files {
			if f.Path == "" || len(f.Status) != 1 {
				t.Fatalf("bad entry %+v", f)
			}
		}
		_, _ = ParseNumstat(in)
		_, _ = ParseLog(in)
	})
}

func TestValidRevision(t *testing.T) {
	for rev, want := range map[string]bool{
		"main": true, "origin/main": true, "HEAD~1": true, strings.Repeat("a", 40): true, "v1^{commit}": true,
		"": false, "-x": false, "--all": false, "a..b": false, "a b": false, "a\nb": false, strings.Repeat("a", 300): false,
	} {
		if got := ValidRevision(rev); got != want {
			t.Errorf("ValidRevision(%q) = %v, want %v", rev, got, want)
		}
	}
}

// BenchmarkCreateBundle measures a bundle of one new commit over a repository
// of 500 files, since the previous commit (what a push asks for).
func BenchmarkCreateBundle(b *testing.B) {
	ws := b.TempDir()
	files := map[string]string{}
	for i := range 500 {
		files[filepath.Join("src", strings.Repeat("d", i%5+1), "f"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+".txt")] = strings.Repeat("line\n", 200)
	}
	initRepo(b, ws, files)
	base := strings.TrimSpace(git(b, ws, "rev-parse", "HEAD"))
	writeFile(b, filepath.Join(ws, "new.txt"), "new\n")
	git(b, ws, "add", "-A")
	git(b, ws, "commit", "-qm", "new")
	w := newWorkspace(b, ws)
	for b.Loop() {
		bn, _, err := w.CreateBundle(b.Context(), RepoID(ws), base)
		if err != nil {
			b.Fatal(err)
		}
		bn.Close()
	}
}
