package gittest

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// BadGitmodules is a .gitmodules whose URL starts with "-": fsck's
// gitmodulesUrl error (an option smuggled to a later clone).
const BadGitmodules = "[submodule \"x\"]\n\tpath = x\n\turl = --upload-pack=touch /tmp/pwned\n"

// CommitRaw commits a tree made of exactly files (path → content) on top of
// HEAD of the repository dir and moves the current branch to it. The tree is
// built with hash-object and mktree, so paths git add refuses (".GIT/config",
// "git~1/x") are possible. It returns the commit.
func CommitRaw(t testing.TB, dir, msg string, files map[string]string) string {
	t.Helper()
	tree := rawTree(t, dir, files)
	commit := strings.TrimSpace(Git(t, dir, "commit-tree", tree, "-p", "HEAD", "-m", msg))
	Git(t, dir, "update-ref", "HEAD", commit)
	return commit
}

// rawTree writes the tree of files and returns its id.
func rawTree(t testing.TB, dir string, files map[string]string) string {
	t.Helper()
	subs := map[string]map[string]string{}
	var lines []string
	for p, content := range files {
		first, rest, nested := strings.Cut(p, "/")
		if nested {
			if subs[first] == nil {
				subs[first] = map[string]string{}
			}
			subs[first][rest] = content
			continue
		}
		lines = append(lines, "100644 blob "+HashObject(t, dir, content)+"\t"+first)
	}
	for name, sub := range subs {
		lines = append(lines, "040000 tree "+rawTree(t, dir, sub)+"\t"+name)
	}
	sort.Strings(lines)
	cmd := exec.Command("git", "mktree", "--missing")
	cmd.Dir, cmd.Env = dir, Env()
	cmd.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git mktree: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// HashObject writes content as a blob of the repository dir and returns its id.
func HashObject(t testing.TB, dir, content string) string {
	t.Helper()
	cmd := exec.Command("git", "hash-object", "-w", "--stdin")
	cmd.Dir, cmd.Env = dir, Env()
	cmd.Stdin = strings.NewReader(content)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git hash-object: %v", err)
	}
	return strings.TrimSpace(string(out))
}
