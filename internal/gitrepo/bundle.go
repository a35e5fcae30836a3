package gitrepo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/capped"
	"github.com/proliferate-ai/sandbox-mcp/gitbundle"
	"github.com/proliferate-ai/sandbox-mcp/internal/fault"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// DefaultMaxBundleBytes bounds a bundle made or taken by the sidecar.
const DefaultMaxBundleBytes = rules.MaxGitBundleBytes

// maxRevisionLen bounds a base revision given by a caller.
const maxRevisionLen = 256

// The bundle errors, each with the status the API answers it with.
var (
	// ErrBadRevision means base does not name a commit of the repository.
	ErrBadRevision error = &fault.Error{Status: http.StatusBadRequest, Msg: "Invalid revision"}
	// ErrNoBranch means HEAD is not on a branch (detached or unborn).
	ErrNoBranch error = &fault.Error{Status: http.StatusConflict, Msg: "HEAD is not on a branch"}
	// ErrNothingNew means the branch holds no commit that base lacks.
	ErrNothingNew error = &fault.Error{Status: http.StatusConflict, Msg: "No commits since base"}
	// ErrBadBundle means a bundle given to ApplyBundle is not one git accepts.
	ErrBadBundle error = &fault.Error{Status: http.StatusBadRequest, Msg: "Invalid bundle"}
)

// TooLargeError says a bundle went past Limit bytes.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("bundle exceeds %d bytes", e.Limit)
}

// tooLarge is a *TooLargeError answered with 413 and the "limit".
func tooLarge(limit int64) error {
	return &fault.Error{Status: http.StatusRequestEntityTooLarge, Msg: "Bundle too large",
		Fields: map[string]any{"limit": limit}, Err: &TooLargeError{Limit: limit}}
}

// CreateBundle makes a bundle of the current branch of the repository id with
// every commit that base (empty: none) lacks. The bundle is written to a
// temporary file first so that a bundle past the size limit fails with a
// *TooLargeError before anything is sent. The file is already unlinked: the
// caller reads it and closes it, and nothing is left behind either way.
func (w *Workspace) CreateBundle(ctx context.Context, id, base string) (*os.File, apitype.GitBundleInfo, error) {
	repo, err := w.resolveRepo(id)
	if err != nil {
		return nil, apitype.GitBundleInfo{}, err
	}
	release, err := w.bundleSlot(ctx)
	if err != nil {
		return nil, apitype.GitBundleInfo{}, err
	}
	defer release()
	branch, head, err := w.currentBranch(ctx, repo)
	if err != nil {
		return nil, apitype.GitBundleInfo{}, err
	}
	args := []string{"bundle", "create", "-q", "-", branch}
	if base != "" {
		sha, err := w.resolveCommit(ctx, repo, base)
		if err != nil {
			return nil, apitype.GitBundleInfo{}, err
		}
		if sha == head {
			return nil, apitype.GitBundleInfo{}, ErrNothingNew
		}
		if w.isAncestor(ctx, repo, head, sha) {
			return nil, apitype.GitBundleInfo{}, ErrNothingNew
		}
		args = append(args, "^"+sha)
	}
	f, err := os.CreateTemp("", "sandbox-mcp-bundle-*")
	if err != nil {
		return nil, apitype.GitBundleInfo{}, fmt.Errorf("bundle temp file: %w", err)
	}
	// Unlinked at once: the descriptor keeps the data for as long as the
	// caller reads it, and no crash leaves a bundle in the temp dir.
	_ = os.Remove(f.Name())
	info := apitype.GitBundleInfo{Branch: branch, Head: head}
	lw := &capped.Writer{W: f, Left: w.maxBundle}
	if err := w.stream(ctx, repo, nil, lw, args...); err != nil {
		f.Close()
		if lw.Over {
			return nil, apitype.GitBundleInfo{}, tooLarge(w.maxBundle)
		}
		if strings.Contains(err.Error(), "empty bundle") {
			return nil, apitype.GitBundleInfo{}, ErrNothingNew
		}
		return nil, apitype.GitBundleInfo{}, err
	}
	info.Size = w.maxBundle - lw.Left
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, apitype.GitBundleInfo{}, err
	}
	return f, info, nil
}

// ApplyBundle takes the branches of the bundle read from r (at most the size
// limit) into refs/remotes/origin/* of the repository id. Nothing else moves:
// not the local branches, not the work tree, no tags. The bundle's objects
// wait in a quarantine (gitbundle.Receive: declared sizes against the limits
// before git inflates anything, index-pack --strict, .gitmodules included)
// and every path its new commits bring is checked (gitbundle.CheckPath); a
// bundle refused on any of these is ErrBadBundle and leaves nothing behind.
func (w *Workspace) ApplyBundle(ctx context.Context, id string, r io.Reader) ([]apitype.GitRefUpdate, error) {
	repo, err := w.resolveRepo(id)
	if err != nil {
		return nil, err
	}
	release, err := w.bundleSlot(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	f, err := os.CreateTemp("", "sandbox-mcp-apply-*.bundle")
	if err != nil {
		return nil, fmt.Errorf("bundle temp file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, io.LimitReader(r, w.maxBundle+1))
	if err != nil {
		return nil, fmt.Errorf("read bundle: %w", err)
	}
	if n > w.maxBundle {
		return nil, tooLarge(w.maxBundle)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	q, err := gitbundle.Receive(ctx, w.git, repo, f.Name(), w.limits)
	var rej *gitbundle.Rejection
	if errors.As(err, &rej) {
		return nil, fmt.Errorf("%w: %v", ErrBadBundle, rej)
	}
	if err != nil {
		return nil, err
	}
	defer q.Drop()
	var tx strings.Builder
	var tips []string
	for _, ref := range q.Header.Refs {
		if name, ok := strings.CutPrefix(ref.Name, "refs/heads/"); ok {
			fmt.Fprintf(&tx, "update refs/remotes/origin/%s %s\n", name, ref.OID)
			tips = append(tips, ref.OID)
		}
	}
	paths, err := q.Paths(ctx, tips, maxChangesetBytes)
	if err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := gitbundle.CheckPath(p); err != nil {
			return nil, fmt.Errorf("%w: %q: %v", ErrBadBundle, p, err)
		}
	}
	before, err := w.originRefs(ctx, repo)
	if err != nil {
		return nil, err
	}
	if err := q.Accept(); err != nil {
		return nil, err
	}
	if err := w.stream(ctx, repo, strings.NewReader(tx.String()), io.Discard, "update-ref", "--stdin"); err != nil {
		return nil, err
	}
	after, err := w.originRefs(ctx, repo)
	if err != nil {
		return nil, err
	}
	updated := []apitype.GitRefUpdate{}
	refs := make([]string, 0, len(after))
	for ref := range after {
		refs = append(refs, ref)
	}
	sort.Strings(refs)
	for _, ref := range refs {
		if before[ref] != after[ref] {
			updated = append(updated, apitype.GitRefUpdate{Ref: ref, Old: before[ref], New: after[ref]})
		}
	}
	return updated, nil
}

// bundleSlot waits, within ctx, for one of the bundle slots: making or taking
// a bundle holds up to MaxBundleBytes on disk and a git pack in memory, so
// only a few run at once, whatever the process limit.
func (w *Workspace) bundleSlot(ctx context.Context) (func(), error) {
	select {
	case w.bundles <- struct{}{}:
		return func() { <-w.bundles }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for a bundle slot: %w", ctx.Err())
	}
}

// currentBranch returns HEAD's branch ref and commit.
func (w *Workspace) currentBranch(ctx context.Context, repo string) (ref, sha string, err error) {
	out, _, err := w.run(ctx, repo, 4096, "symbolic-ref", "--quiet", "HEAD")
	if err != nil {
		return "", "", ErrNoBranch
	}
	ref = strings.TrimSpace(string(out))
	if !strings.HasPrefix(ref, "refs/heads/") {
		return "", "", ErrNoBranch
	}
	out, _, err = w.run(ctx, repo, 4096, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return "", "", ErrNoBranch
	}
	return ref, strings.TrimSpace(string(out)), nil
}

// resolveCommit turns a caller's revision into a commit id. Anything that could
// be read as an option, or that does not name a commit, is ErrBadRevision.
func (w *Workspace) resolveCommit(ctx context.Context, repo, rev string) (string, error) {
	if !ValidRevision(rev) {
		return "", ErrBadRevision
	}
	out, _, err := w.run(ctx, repo, 4096, "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", ErrBadRevision
		}
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

// ValidRevision reports whether rev may be given to git as a revision: not
// empty, not an option, no whitespace or control characters, no range syntax,
// bounded length.
func ValidRevision(rev string) bool {
	if rev == "" || len(rev) > maxRevisionLen || rev[0] == '-' || strings.Contains(rev, "..") {
		return false
	}
	for _, c := range rev {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// isAncestor reports whether a is an ancestor of b (or equal).
func (w *Workspace) isAncestor(ctx context.Context, repo, a, b string) bool {
	_, _, err := w.run(ctx, repo, 64, "merge-base", "--is-ancestor", a, b)
	return err == nil
}

// originRefs maps refs/remotes/origin/* (symbolic refs left out) to their commits.
func (w *Workspace) originRefs(ctx context.Context, repo string) (map[string]string, error) {
	out, cut, err := w.run(ctx, repo, 4<<20, "for-each-ref", "--format=%(refname) %(objectname) %(symref)", "refs/remotes/origin/")
	if err != nil {
		return nil, err
	}
	if cut {
		return nil, errors.New("too many remote refs")
	}
	refs := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		// Symbolic refs (origin/HEAD) follow their target and are not listed.
		if f := strings.Fields(sc.Text()); len(f) == 2 {
			refs[f[0]] = f[1]
		}
	}
	return refs, nil
}
