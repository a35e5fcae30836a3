package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/gitexec"
)

// Status runs git status in the repository named by id and parses it.
func (w *Workspace) Status(ctx context.Context, id string) (apitype.GitStatusResponse, error) {
	repo, err := w.resolveRepo(id)
	if err != nil {
		return apitype.GitStatusResponse{}, err
	}
	out, cut, err := w.run(ctx, repo, maxStatusBytes, "status", "--porcelain=v2", "--branch", "-z")
	if err != nil {
		return apitype.GitStatusResponse{}, err
	}
	if cut {
		return apitype.GitStatusResponse{}, fmt.Errorf("git status in %s: output exceeds %d bytes", repo, maxStatusBytes)
	}
	return ParseStatus(out)
}

// Diff returns `git diff HEAD [-- path]` in the repository named by id, or
// `git diff [-- path]` when the repository has no commit yet. A diff longer
// than MaxDiffBytes is cut there and TruncatedMarker appended; the rest is
// never read. An empty path means the whole repository.
func (w *Workspace) Diff(ctx context.Context, id, path string) (string, error) {
	repo, err := w.resolveRepo(id)
	if err != nil {
		return "", err
	}
	args := []string{"diff", "--no-color", "--no-ext-diff"}
	var spec []string
	if path != "" {
		clean, err := resolvePath(repo, path)
		if err != nil {
			return "", err
		}
		spec = []string{clean}
	}
	out, cut, err := w.run(ctx, repo, w.maxDiff, append(append(args, "HEAD", "--"), spec...)...)
	if err != nil {
		if !w.noCommits(ctx, repo) {
			return "", err
		}
		out, cut, err = w.run(ctx, repo, w.maxDiff, append(append(args, "--"), spec...)...)
		if err != nil {
			return "", err
		}
	}
	if !cut {
		return string(out), nil
	}
	return string(trimPartialRune(out)) + TruncatedMarker, nil
}

// noCommits reports whether HEAD does not resolve to a commit (a new repository).
func (w *Workspace) noCommits(ctx context.Context, repo string) bool {
	_, _, err := w.run(ctx, repo, 1024, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
	var ee *exec.ExitError
	return errors.As(err, &ee)
}

// trimPartialRune drops an incomplete UTF-8 sequence that a cut left at the end
// of b, so the JSON answer carries no replacement character for it.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < utf8.RuneSelf {
			return b // ASCII: nothing split
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// run runs git with args in dir and returns at most limit bytes of its
// standard output; cut reports that there was more, in which case git is
// killed instead of being read to the end. Every call ends within the
// timeout: git and anything it started are killed and reaped (gitexec).
func (w *Workspace) run(ctx context.Context, dir string, limit int, args ...string) (out []byte, cut bool, err error) {
	return w.git.Output(ctx, gitexec.Cmd{Dir: dir, Args: args}, limit)
}

// stream runs git with args in dir, stdin from in (nil: none) and stdout into
// out, with the same timeout, process limit and clean-up as run.
func (w *Workspace) stream(ctx context.Context, dir string, in io.Reader, out io.Writer, args ...string) error {
	return w.git.Run(ctx, gitexec.Cmd{Dir: dir, Args: args, Stdin: in, Stdout: out})
}
