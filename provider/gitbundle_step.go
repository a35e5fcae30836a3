package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
)

// GitBundler makes bundles of remotes on the host; *gitpush.Mirrors is one.
type GitBundler interface {
	Bundle(ctx context.Context, r gitpush.Remote, branch string, haves []string, w io.Writer) (gitpush.BundleResult, error)
}

// ExecGitBundle runs a StepGitBundle step: the host makes the bundle with g
// (nil: DefaultGitMirrors; the token stays on the host), ex writes it into the sandbox and clones from
// it there, or with Pull fetches it into refs/remotes/origin/* of the existing
// clone and fast-forwards the branch. origin is the plain URL afterwards and
// nothing in the sandbox holds a credential. It returns a line for the boot
// report.
func ExecGitBundle(ctx context.Context, ex Executor, g GitBundler, s Step) (string, error) {
	spec := s.Git
	if s.Kind != StepGitBundle || spec == nil {
		return "", fmt.Errorf("step %q is not a git-bundle step", s.Name)
	}
	if g == nil {
		m, err := DefaultGitMirrors()
		if err != nil {
			return "", err
		}
		g = m
	}
	remote := gitpush.Remote{URL: spec.RepoURL, Token: spec.Token}
	if spec.Pull {
		return pullFromBundle(ctx, ex, g, s, remote)
	}
	var buf bytes.Buffer
	res, err := g.Bundle(ctx, remote, spec.Branch, nil, &buf)
	if errors.Is(err, gitpush.ErrNoBranch) && spec.Branch != "" {
		// As the token clone does: a missing branch falls back to the default one.
		buf.Reset()
		res, err = g.Bundle(ctx, remote, "", nil, &buf)
	}
	if err != nil {
		return "", errors.New(RedactSecrets(err.Error()))
	}
	if err := ex.WriteFile(ctx, spec.BundlePath, buf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("write bundle: %w", err)
	}
	out, err := ex.Run(ctx, BuildBundleCloneCommand(spec.BundlePath, res.Branch, spec.Target, spec.RepoURL), s.Timeout())
	if err != nil {
		return "", err
	}
	if out.ExitCode != 0 {
		return "", fmt.Errorf("clone from bundle: exit %d: %s", out.ExitCode, CapOutput(out.Stdout+out.Stderr, 0))
	}
	return fmt.Sprintf("cloned %s at %s from a %d-byte host bundle", res.Branch, short(res.SHA), res.Size), nil
}

var defaultMirrors struct {
	once sync.Once
	m    *gitpush.Mirrors
	err  error
}

// DefaultGitMirrors is the host's git mirror cache for providers given none:
// $XDG_CACHE_HOME/sandbox-mcp/git-mirrors (os.UserCacheDir), made on first use.
func DefaultGitMirrors() (*gitpush.Mirrors, error) {
	defaultMirrors.once.Do(func() {
		dir, err := os.UserCacheDir()
		if err != nil {
			defaultMirrors.err = fmt.Errorf("git mirror cache: %w", err)
			return
		}
		defaultMirrors.m, defaultMirrors.err = gitpush.New(gitpush.Options{CacheDir: filepath.Join(dir, "sandbox-mcp", "git-mirrors")})
	})
	return defaultMirrors.m, defaultMirrors.err
}

// pullFromBundle fetches the plan's remote (the host's URL: never the
// sandbox's origin, which code inside may have rewritten); only the branch
// name and commit ids are read from inside, and Bundle validates the branch.
func pullFromBundle(ctx context.Context, ex Executor, g GitBundler, s Step, remote gitpush.Remote) (string, error) {
	spec := s.Git
	out, err := ex.Run(ctx, "cd "+ShellEscape(spec.Target)+` && b=$(git symbolic-ref --quiet --short HEAD) && echo "$b" && git rev-parse HEAD && { git rev-parse --verify --quiet "refs/remotes/origin/$b" || true; }`, s.Timeout())
	if err != nil {
		return "", err
	}
	lines := strings.Fields(out.Stdout)
	if out.ExitCode != 0 || len(lines) < 2 {
		return "", fmt.Errorf("find the branch of %s: exit %d: %s", spec.Target, out.ExitCode, CapOutput(out.Stdout+out.Stderr, 0))
	}
	branch, haves := lines[0], lines[1:]
	var buf bytes.Buffer
	res, err := g.Bundle(ctx, remote, branch, haves, &buf)
	if errors.Is(err, gitpush.ErrUpToDate) {
		return "already up to date", nil
	}
	if err != nil {
		return "", errors.New(RedactSecrets(err.Error()))
	}
	if err := ex.WriteFile(ctx, spec.BundlePath, buf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("write bundle: %w", err)
	}
	out, err = ex.Run(ctx, BuildBundlePullCommand(spec.BundlePath, branch, spec.Target), s.Timeout())
	if err != nil {
		return "", err
	}
	if out.ExitCode != 0 {
		return "", fmt.Errorf("pull from bundle: exit %d: %s", out.ExitCode, CapOutput(out.Stdout+out.Stderr, 0))
	}
	return fmt.Sprintf("fast-forwarded %s to %s", branch, short(res.SHA)), nil
}

// BuildBundleCloneCommand clones branch from a bundle file into target, points
// origin at the plain repo URL and removes the bundle whatever happened.
func BuildBundleCloneCommand(bundle, branch, target, repoURL string) string {
	return "git clone -q --branch " + ShellEscape(branch) + " " + ShellEscape(bundle) + " " + ShellEscape(target) +
		"; rc=$?; rm -f " + ShellEscape(bundle) +
		"; [ $rc -eq 0 ] && git -C " + ShellEscape(target) + " " + gitSafeDirectory + " remote set-url origin " + ShellEscape(repoURL)
}

// BuildBundlePullCommand fetches a bundle's branches into refs/remotes/origin/*
// of target, fast-forwards branch (as git pull --ff-only) and removes the bundle.
func BuildBundlePullCommand(bundle, branch, target string) string {
	return "cd " + ShellEscape(target) + " && git " + gitSafeDirectory + " fetch -q --no-tags " + ShellEscape(bundle) + " '+refs/heads/*:refs/remotes/origin/*'" +
		"; rc=$?; rm -f " + ShellEscape(bundle) +
		"; [ $rc -eq 0 ] && git " + gitSafeDirectory + " merge --ff-only -q " + ShellEscape("refs/remotes/origin/"+branch) + " 2>&1"
}

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
