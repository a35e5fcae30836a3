package gitbundle

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxPathBytes bounds one path of a tree (Linux's PATH_MAX).
const MaxPathBytes = 4096

// CheckPath refuses a path of a commit that must not reach a checkout on
// any file system: empty, ".", ".." or doubled-slash components, a NUL, and
// any component that a case-insensitive, HFS+ or NTFS file system would
// take for ".git" (IsDotGit). A path that passes is safe to write below a
// work tree; whether it may hold a secret is the deny globs' question.
func CheckPath(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if len(p) > MaxPathBytes {
		return fmt.Errorf("path longer than %d bytes", MaxPathBytes)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return errors.New("NUL in path")
	}
	for comp := range strings.SplitSeq(p, "/") {
		switch comp {
		case "":
			return errors.New("empty path component")
		case ".", "..":
			return fmt.Errorf("%q component", comp)
		}
		if IsDotGit(comp) {
			return fmt.Errorf("component %q is .git on some file system", comp)
		}
	}
	return nil
}

// IsDotGit reports whether a file system could take the path component name
// for ".git": case folded (".GIT"); HFS+'s ignorable code points removed
// (".g\u200cit"); NTFS's trailing dots and spaces (".git. "), its
// backslash separator and alternate streams (".git::$INDEX_ALLOCATION"),
// and its 8.3 short names ("GIT~1").
func IsDotGit(name string) bool {
	name = stripIgnorable(name)
	for part := range strings.FieldsFuncSeq(name, func(r rune) bool { return r == '\\' || r == ':' }) {
		part = strings.ToLower(strings.TrimRight(part, ". "))
		if part == ".git" || isShortGit(part) {
			return true
		}
	}
	return false
}

// isShortGit is "git~N", an 8.3 short name of .git.
func isShortGit(s string) bool {
	rest, ok := strings.CutPrefix(s, "git~")
	if !ok || rest == "" || len(rest) > 6 {
		return false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return false
		}
	}
	return rest[0] != '0'
}

// stripIgnorable removes the code points HFS+ ignores in names.
func stripIgnorable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, hfsIgnorable) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if hfsIgnorable(r) {
			return -1
		}
		return r
	}, s)
}

func hfsIgnorable(r rune) bool {
	return r >= 0x200c && r <= 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x206a && r <= 0x206f || r == 0xfeff
}
