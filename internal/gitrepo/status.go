package gitrepo

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// ParseStatus parses the output of `git status --porcelain=v2 --branch -z`.
//
// The branch comes from "# branch.head", ahead and behind from "# branch.ab +A -B";
// files come from ordinary ("1"), renamed or copied ("2", the new path), unmerged
// ("u") and untracked ("?") entries. Status is the two-letter XY code, "?" for
// untracked files. Paths are returned byte for byte, so names with spaces, tabs,
// newlines or non-ASCII characters survive. Unknown entry types are skipped so a
// newer git does not break the parser; a malformed known entry is an error.
func ParseStatus(out []byte) (apitype.GitStatusResponse, error) {
	st := apitype.GitStatusResponse{Files: []apitype.GitFile{}}
	fields := bytes.Split(out, []byte{0})
	// -z terminates every entry with NUL, so the last field is empty; a missing
	// final NUL (truncated output) still parses the last entry.
	if n := len(fields); n > 0 && len(fields[n-1]) == 0 {
		fields = fields[:n-1]
	}
	for i := 0; i < len(fields); i++ {
		e := string(fields[i])
		if e == "" {
			return st, fmt.Errorf("parse status: empty entry at field %d", i)
		}
		switch e[0] {
		case '#':
			if err := parseHeader(e, &st); err != nil {
				return st, err
			}
		case '1':
			// 1 XY sub mH mI mW hH hI path
			xy, path, err := splitEntry(e, 8)
			if err != nil {
				return st, err
			}
			st.Files = append(st.Files, apitype.GitFile{Status: xy, Path: path})
		case '2':
			// 2 XY sub mH mI mW hH hI Xscore path NUL origPath
			xy, path, err := splitEntry(e, 9)
			if err != nil {
				return st, err
			}
			if i+1 >= len(fields) {
				return st, fmt.Errorf("parse status: rename of %q without its original path", path)
			}
			i++ // the original path
			st.Files = append(st.Files, apitype.GitFile{Status: xy, Path: path})
		case 'u':
			// u XY sub m1 m2 m3 mW h1 h2 h3 path
			xy, path, err := splitEntry(e, 10)
			if err != nil {
				return st, err
			}
			st.Files = append(st.Files, apitype.GitFile{Status: xy, Path: path})
		case '?':
			if len(e) < 3 || e[1] != ' ' {
				return st, fmt.Errorf("parse status: malformed untracked entry %q", e)
			}
			st.Files = append(st.Files, apitype.GitFile{Status: "?", Path: e[2:]})
		default:
			// "!" (ignored) and anything a later git adds.
		}
	}
	return st, nil
}

// splitEntry splits an entry of the form "<type> XY f2 ... fn path", where n
// space-separated fields precede the path, and returns XY and the path.
func splitEntry(e string, n int) (xy, path string, err error) {
	parts := strings.SplitN(e, " ", n+1)
	if len(parts) != n+1 || len(parts[0]) != 1 || len(parts[1]) != 2 || parts[n] == "" {
		return "", "", fmt.Errorf("parse status: malformed entry %q", e)
	}
	return parts[1], parts[n], nil
}

func parseHeader(e string, st *apitype.GitStatusResponse) error {
	key, val, _ := strings.Cut(strings.TrimPrefix(e, "# "), " ")
	switch key {
	case "branch.head":
		st.Branch = val
	case "branch.ab":
		a, b, ok := strings.Cut(val, " ")
		if !ok || !strings.HasPrefix(a, "+") || !strings.HasPrefix(b, "-") {
			return fmt.Errorf("parse status: malformed header %q", e)
		}
		ahead, err1 := strconv.Atoi(a[1:])
		behind, err2 := strconv.Atoi(b[1:])
		if err1 != nil || err2 != nil || ahead < 0 || behind < 0 {
			return fmt.Errorf("parse status: malformed header %q", e)
		}
		st.Ahead, st.Behind = ahead, behind
	}
	return nil
}
