package gitrepo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/capped"
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

// gitProc is one git process of the workspace: it holds a slot of the
// process limit, ends within the timeout, and is killed with its process
// group (git may start helpers) when its context ends.
type gitProc struct {
	*exec.Cmd
	ctx     context.Context
	name    string // the git command (args[0]), for errors
	dir     string
	timeout time.Duration
	stderr  *capped.Buffer
	release func()
}

// command takes a slot of the process limit and returns git with args in
// dir, not started; release frees the slot and the timeout after Wait.
func (w *Workspace) command(ctx context.Context, dir string, args []string) (*gitProc, error) {
	select {
	case w.procs <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("git %s in %s: %w", args[0], dir, ctx.Err())
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	cmd := exec.CommandContext(ctx, w.git, append(append([]string{}, w.baseArgs...), args...)...)
	cmd.Dir = dir
	cmd.Env = w.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = time.Second
	p := &gitProc{Cmd: cmd, ctx: ctx, name: args[0], dir: dir, timeout: w.timeout, release: func() { cancel(); <-w.procs }}
	p.stderr = &capped.Buffer{Max: 4096}
	cmd.Stderr = p.stderr
	return p, nil
}

// failure is the error of a run that ended with werr: the timeout when it
// struck, else git's exit with what it wrote to stderr; nil for success.
func (p *gitProc) failure(werr error) error {
	switch {
	case p.ctx.Err() != nil:
		return fmt.Errorf("git %s in %s: %w (limit %s)", p.name, p.dir, p.ctx.Err(), p.timeout)
	case werr != nil:
		return fmt.Errorf("git %s in %s: %w: %s", p.name, p.dir, werr, strings.TrimSpace(p.stderr.String()))
	}
	return nil
}

// run runs git with args in dir and returns at most limit bytes of its
// standard output; cut reports that there was more, in which case git is
// killed instead of being read to the end. Every call ends within the
// timeout: git and anything it started are killed and reaped.
func (w *Workspace) run(ctx context.Context, dir string, limit int, args ...string) (out []byte, cut bool, err error) {
	p, err := w.command(ctx, dir, args)
	if err != nil {
		return nil, false, err
	}
	defer p.release()
	stdout, err := p.StdoutPipe()
	if err != nil {
		return nil, false, fmt.Errorf("git %s: %w", args[0], err)
	}
	if err := p.Start(); err != nil {
		return nil, false, fmt.Errorf("start git %s: %w", args[0], err)
	}
	out, rerr := io.ReadAll(io.LimitReader(stdout, int64(limit)+1))
	if len(out) > limit {
		out, cut = out[:limit], true
		_ = killGroup(p.Cmd)
	}
	werr := p.Wait()
	if cut {
		return out, true, nil
	}
	if err := p.failure(werr); err != nil {
		return nil, false, err
	}
	if rerr != nil {
		return nil, false, fmt.Errorf("read git %s output: %w", args[0], rerr)
	}
	return out, false, nil
}

// killGroup kills git's process group: git may have started helpers.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}
