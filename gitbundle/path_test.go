package gitbundle

import (
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"README.md", true},
		{"src/main.go", true},
		{".gitignore", true},
		{".github/workflows/ci.yml", true},
		{".gitmodules", true},
		{"a/.gitkeep", true},
		{"git", true},
		{"git~0/x", true},
		{"gitx~1/x", true},
		{"docs/.git-blame-ignore-revs", true},
		{"", false},
		{"/abs", false},
		{"a//b", false},
		{"a/", false},
		{"./a", false},
		{"a/../b", false},
		{"..", false},
		{"a\x00b", false},
		{".git", false},
		{".git/config", false},
		{"sub/.git/hooks/post-checkout", false},
		{".GIT/config", false},
		{".Git/config", false},
		{"git~1/config", false},
		{"GIT~1/config", false},
		{"git~2/config", false},
		{".git./config", false},
		{".git ./config", false},
		{".git   /config", false},
		{".git::$INDEX_ALLOCATION/config", false},
		{"a\\.git\\config", false},
		{".g\u200cit/config", false},
		{".\u200dGit\ufeff/config", false},
		{"\u206a.git/config", false},
		{strings.Repeat("a/", 2048) + "b", false},
	}
	for _, tt := range tests {
		err := CheckPath(tt.path)
		if (err == nil) != tt.ok {
			t.Errorf("CheckPath(%q) = %v, want ok=%v", tt.path, err, tt.ok)
		}
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"a/b", ".git/config", ".GIT", "git~1", ".g\u200cit", ".git. ", "a\\.git", ".git:x", "x/../y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if CheckPath(p) != nil {
			return
		}
		for comp := range strings.SplitSeq(p, "/") {
			plain := strings.ToLower(strings.TrimRight(stripIgnorable(comp), ". "))
			if comp == "" || comp == "." || comp == ".." || plain == ".git" || plain == "git~1" {
				t.Fatalf("CheckPath(%q) accepted the component %q", p, comp)
			}
		}
	})
}
