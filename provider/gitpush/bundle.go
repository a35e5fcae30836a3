package gitpush

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/capped"
	"github.com/proliferate-ai/sandbox-mcp/gitbundle"
)

// ErrUpToDate means a bundle would carry nothing the sandbox lacks.
var ErrUpToDate = errors.New("already up to date")

// ErrNoBranch means the remote has no such branch.
var ErrNoBranch = errors.New("no such branch on the remote")

// BundleResult describes a bundle made by Bundle.
type BundleResult struct {
	// Branch is the branch bundled (the remote's default when none was asked).
	Branch string `json:"branch"`
	SHA    string `json:"sha"`
	Size   int64  `json:"size"`
}

// Bundle fetches the remote into its mirror and writes a bundle of one branch
// (empty: the remote's default branch) to w, as refs/heads/<branch>. Commits in
// haves that the mirror knows are left out, so a sandbox that already has them
// receives only what is new; haves the mirror does not know are ignored. The
// bundle carries no credential: a sandbox clones or fetches from it offline.
func (m *Mirrors) Bundle(ctx context.Context, r Remote, branch string, haves []string, w io.Writer) (BundleResult, error) {
	if err := checkURL(r.URL); err != nil {
		return BundleResult{}, err
	}
	dir := m.mirrorDir(r.URL)
	defer m.lock(dir)()
	if err := m.update(ctx, dir, r); err != nil {
		return BundleResult{}, err
	}
	if branch == "" {
		out, err := m.run(ctx, dir, nil, nil, "symbolic-ref", "--quiet", "--short", "HEAD")
		if err != nil {
			return BundleResult{}, fmt.Errorf("default branch: %w", err)
		}
		branch = strings.TrimSpace(string(out))
	}
	ref := "refs/heads/" + branch
	if !gitbundle.ValidRefName(ref) {
		return BundleResult{}, fmt.Errorf("branch %q: not a valid branch name", branch)
	}
	sha, _ := m.rev(ctx, dir, nil, ref+"^{commit}")
	if sha == "" {
		return BundleResult{Branch: branch}, fmt.Errorf("%w: %s", ErrNoBranch, branch)
	}
	res := BundleResult{Branch: branch, SHA: sha}
	args := []string{"bundle", "create", "--quiet", "-", ref}
	for _, h := range haves {
		if !isHexOID(h) {
			continue
		}
		if _, err := m.run(ctx, dir, nil, nil, "cat-file", "-e", h+"^{commit}"); err != nil {
			continue
		}
		if h == sha {
			return res, ErrUpToDate
		}
		if _, err := m.run(ctx, dir, nil, nil, "merge-base", "--is-ancestor", sha, h); err == nil {
			return res, ErrUpToDate
		}
		args = append(args, "^"+h)
	}
	cw := &capped.Writer{W: w, Left: m.maxBundle}
	if err := m.stream(ctx, dir, nil, nil, cw, args...); err != nil {
		if cw.Over {
			return res, fmt.Errorf("bundle of %s exceeds %d bytes", branch, m.maxBundle)
		}
		return res, err
	}
	res.Size = m.maxBundle - cw.Left
	return res, nil
}

func isHexOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
