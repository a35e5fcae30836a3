package gitrepo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/capped"
)

// MaxChangesetCommits bounds the commits a changeset lists.
const MaxChangesetCommits = 10000

// maxChangesetBytes bounds the output of each git call behind a changeset.
const maxChangesetBytes = 16 << 20

// Changeset summarises what the current branch of the repository id holds that
// base lacks: its commits (newest first) and the files changed between base and
// the branch tip, renames detected.
func (w *Workspace) Changeset(ctx context.Context, id, base string) (apitype.GitChangesetResponse, error) {
	repo, err := w.resolveRepo(id)
	if err != nil {
		return apitype.GitChangesetResponse{}, err
	}
	branch, head, err := w.currentBranch(ctx, repo)
	if err != nil {
		return apitype.GitChangesetResponse{}, err
	}
	baseSHA, err := w.resolveCommit(ctx, repo, base)
	if err != nil {
		return apitype.GitChangesetResponse{}, err
	}
	cs := apitype.GitChangesetResponse{Branch: branch, Base: baseSHA, Head: head}
	run := func(args ...string) ([]byte, error) {
		out, cut, err := w.run(ctx, repo, maxChangesetBytes, args...)
		if err == nil && cut {
			err = fmt.Errorf("git %s: output exceeds %d bytes", args[0], maxChangesetBytes)
		}
		return out, err
	}
	out, err := run("log", "-z", "--max-count="+strconv.Itoa(MaxChangesetCommits),
		"--format=%H%x1f%s%x1f%an <%ae>", baseSHA+".."+head)
	if err != nil {
		return cs, err
	}
	if cs.Commits, err = ParseLog(out); err != nil {
		return cs, err
	}
	if cs.Files, err = w.changedFiles(ctx, repo, run, baseSHA, head); err != nil {
		return cs, err
	}
	return cs, nil
}

// changedFiles lists the files changed between two commits with their status,
// binary flag and new size.
func (w *Workspace) changedFiles(ctx context.Context, repo string, run func(...string) ([]byte, error), from, to string) ([]apitype.GitChangedFile, error) {
	raw, err := run("diff", "-z", "--raw", "--no-abbrev", "-M", "--no-ext-diff", "--no-textconv", from, to)
	if err != nil {
		return nil, err
	}
	files, shas, err := ParseRawDiff(raw)
	if err != nil {
		return nil, err
	}
	num, err := run("diff", "-z", "--numstat", "-M", "--no-ext-diff", "--no-textconv", from, to)
	if err != nil {
		return nil, err
	}
	binary, err := ParseNumstat(num)
	if err != nil {
		return nil, err
	}
	var in bytes.Buffer
	for i := range files {
		files[i].Binary = binary[files[i].Path]
		if shas[i] != "" {
			in.WriteString(shas[i] + "\n")
		}
	}
	if in.Len() == 0 {
		return files, nil
	}
	var out bytes.Buffer
	lw := &capped.Writer{W: &out, Left: maxChangesetBytes}
	if err := w.stream(ctx, repo, &in, lw, "cat-file", "--batch-check=%(objectsize)"); err != nil {
		return nil, err
	}
	sizes := strings.Fields(out.String())
	j := 0
	for i := range files {
		if shas[i] == "" {
			continue
		}
		if j < len(sizes) {
			files[i].Size, _ = strconv.ParseInt(sizes[j], 10, 64)
		}
		j++
	}
	return files, nil
}

// ParseLog parses `git log -z --format=%H%x1f%s%x1f%an <%ae>`.
func ParseLog(out []byte) ([]apitype.GitCommit, error) {
	commits := []apitype.GitCommit{}
	for _, rec := range bytes.Split(out, []byte{0}) {
		rec = bytes.TrimLeft(rec, "\n")
		if len(rec) == 0 {
			continue
		}
		f := strings.SplitN(string(rec), "\x1f", 3)
		if len(f) != 3 || !isHex(f[0]) {
			return nil, fmt.Errorf("parse git log: malformed record %q", truncate(string(rec), 80))
		}
		commits = append(commits, apitype.GitCommit{SHA: f[0], Subject: f[1], Author: f[2]})
	}
	return commits, nil
}

// ParseRawDiff parses `git diff -z --raw --no-abbrev`: one entry per changed
// file, and next to it the new blob id ("" for a deletion or a submodule).
func ParseRawDiff(out []byte) ([]apitype.GitChangedFile, []string, error) {
	files := []apitype.GitChangedFile{}
	var shas []string
	fields := bytes.Split(out, []byte{0})
	if n := len(fields); n > 0 && len(fields[n-1]) == 0 {
		fields = fields[:n-1]
	}
	for i := 0; i < len(fields); {
		meta := string(fields[i])
		i++
		if !strings.HasPrefix(meta, ":") {
			return nil, nil, fmt.Errorf("parse git diff --raw: entry %q does not start with ':'", truncate(meta, 80))
		}
		m := strings.Fields(meta[1:])
		if len(m) != 5 || m[4] == "" || !isHex(m[2]) || !isHex(m[3]) {
			return nil, nil, fmt.Errorf("parse git diff --raw: malformed entry %q", truncate(meta, 80))
		}
		f := apitype.GitChangedFile{Status: m[4][:1], OldMode: m[0], Mode: m[1]}
		if i >= len(fields) {
			return nil, nil, errors.New("parse git diff --raw: entry without a path")
		}
		if f.Status == "R" || f.Status == "C" {
			if i+1 >= len(fields) {
				return nil, nil, errors.New("parse git diff --raw: rename without its new path")
			}
			f.OldPath, f.Path = string(fields[i]), string(fields[i+1])
			i += 2
		} else {
			f.Path = string(fields[i])
			i++
		}
		if f.Path == "" {
			return nil, nil, errors.New("parse git diff --raw: empty path")
		}
		sha := m[3]
		if f.Status == "D" || f.Mode == "160000" || strings.Trim(sha, "0") == "" {
			sha = ""
		}
		if f.OldMode == "000000" {
			f.OldMode = ""
		}
		if f.Mode == "000000" {
			f.Mode = ""
		}
		files = append(files, f)
		shas = append(shas, sha)
	}
	return files, shas, nil
}

// ParseNumstat parses `git diff -z --numstat` and returns the (new) paths git
// counts as binary.
func ParseNumstat(out []byte) (map[string]bool, error) {
	binary := map[string]bool{}
	fields := bytes.Split(out, []byte{0})
	if n := len(fields); n > 0 && len(fields[n-1]) == 0 {
		fields = fields[:n-1]
	}
	for i := 0; i < len(fields); {
		rec := string(fields[i])
		i++
		parts := strings.SplitN(rec, "\t", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("parse git diff --numstat: malformed entry %q", truncate(rec, 80))
		}
		path := parts[2]
		if path == "" { // rename: old and new path follow
			if i+1 >= len(fields) {
				return nil, errors.New("parse git diff --numstat: rename without its paths")
			}
			path = string(fields[i+1])
			i += 2
		}
		if parts[0] == "-" && parts[1] == "-" {
			binary[path] = true
		}
	}
	return binary, nil
}

func isHex(s string) bool {
	if len(s) < 4 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
