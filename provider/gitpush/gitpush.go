// Package gitpush is the trusted, host side of tokenless sandboxes. The user's
// git token never enters a sandbox: the host keeps a bare mirror of each
// remote (fetched with the token), hands sandboxes bundles made from it (boot,
// pull on restore, sync), and pushes the agent's work for them, from a bundle
// the sandbox made, after checking it against the mirror and a policy: the
// only target is refs/heads/session/<sessionId>, fast-forward only, no file
// matching a deny glob, bounded blob and total sizes.
//
// The token reaches git only through the environment of the one git process
// that talks to the remote, read back by an askpass script that holds no
// secret; it is never written to a file, a URL or git's configuration.
package gitpush

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/gitbundle"
	"github.com/proliferate-ai/sandbox-mcp/gitexec"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Defaults.
const (
	DefaultTimeout        = 5 * time.Minute
	DefaultUsername       = "x-access-token"
	DefaultMaxBundleBytes = rules.MaxGitBundleBytes
	// maxOutput bounds what is read of one git command's standard output.
	maxOutput = 64 << 20
)

// tokenEnv is the variable the askpass script reads; it is set only in the
// environment of a git process that talks to the remote.
const tokenEnv = "GITPUSH_TOKEN"

// userEnv is the user name the askpass script answers with.
const userEnv = "GITPUSH_USERNAME"

// askpassScript answers git's username and password prompts from the
// environment. It contains no secret.
const askpassScript = `#!/bin/sh
case "$1" in
Username*) printf '%s\n' "${GITPUSH_USERNAME:-x-access-token}" ;;
*) printf '%s\n' "$GITPUSH_TOKEN" ;;
esac
`

// Remote is a git remote and the credential for it.
type Remote struct {
	// URL is an http(s) URL without credentials.
	URL string
	// Token is the password git sends (as for GitHub's x-access-token); empty
	// means none.
	Token string
	// Username defaults to DefaultUsername.
	Username string
}

// Options configures Mirrors.
type Options struct {
	// CacheDir holds the bare mirrors and the askpass script; required.
	CacheDir string
	// Git is the git binary; default "git" on PATH.
	Git string
	// Timeout bounds each git command; default DefaultTimeout.
	Timeout time.Duration
	// MaxBundleBytes bounds a bundle taken in or given out; default DefaultMaxBundleBytes.
	MaxBundleBytes int64
	// Policy decides what a push may carry; zero fields take the defaults.
	Policy Policy
	// Limits bound the pack of a bundle pushed, checked before git inflates
	// it; zero fields take rules.GitBundleMax*.
	Limits gitbundle.Limits
	// MaxMirrorBytes caps one mirror: past it the mirror is garbage-collected
	// and, still past it, refused; default rules.GitMirrorMaxBytes.
	MaxMirrorBytes int64
}

// Mirrors keeps one bare mirror per remote URL and moves commits between the
// remotes and sandboxes through them. Safe for concurrent use; commands on one
// mirror are serialised.
type Mirrors struct {
	dir       string
	git       *gitexec.Runner
	maxBundle int64
	policy    Policy
	limits    gitbundle.Limits
	maxMirror int64
	askpass   string

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// New checks opts and prepares the cache directory.
func New(opts Options) (*Mirrors, error) {
	if opts.CacheDir == "" {
		return nil, errors.New("gitpush: CacheDir is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	// The token and user name are set only on the commands that talk to
	// the remote; an inherited value never reaches any git.
	git, err := gitexec.New(gitexec.Options{Git: opts.Git, Timeout: opts.Timeout, Unset: []string{tokenEnv, userEnv}})
	if err != nil {
		return nil, fmt.Errorf("gitpush: %w", err)
	}
	if opts.MaxBundleBytes <= 0 {
		opts.MaxBundleBytes = DefaultMaxBundleBytes
	}
	if opts.Limits.MaxObjectBytes <= 0 {
		opts.Limits.MaxObjectBytes = rules.GitBundleMaxObjectBytes
	}
	if opts.Limits.MaxInflatedBytes <= 0 {
		opts.Limits.MaxInflatedBytes = rules.GitBundleMaxInflatedBytes
	}
	if opts.Limits.MaxObjects == 0 {
		opts.Limits.MaxObjects = rules.GitBundleMaxObjects
	}
	if opts.MaxMirrorBytes <= 0 {
		opts.MaxMirrorBytes = rules.GitMirrorMaxBytes
	}
	policy, err := opts.Policy.withDefaults()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("gitpush: cache dir: %w", err)
	}
	sweepSpool(dir)
	askpass := filepath.Join(dir, "askpass.sh")
	if err := os.WriteFile(askpass, []byte(askpassScript), 0o700); err != nil {
		return nil, fmt.Errorf("gitpush: askpass: %w", err)
	}
	return &Mirrors{
		dir: dir, git: git, maxBundle: opts.MaxBundleBytes, policy: policy, limits: opts.Limits, maxMirror: opts.MaxMirrorBytes,
		askpass: askpass, locks: map[string]*sync.Mutex{},
	}, nil
}

// checkURL accepts http(s) URLs without credentials, query or fragment.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("remote %q: want an http(s) URL", redactURL(raw))
	}
	if u.User != nil {
		return fmt.Errorf("remote %q: credentials belong in the token, not the URL", redactURL(raw))
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("remote %q: no query or fragment allowed", redactURL(raw))
	}
	return nil
}

func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = url.User("REDACTED")
		return u.String()
	}
	return raw
}

// mirrorDir is the mirror of a remote URL.
func (m *Mirrors) mirrorDir(rawURL string) string {
	sum := sha256.Sum256([]byte(strings.TrimSuffix(strings.TrimRight(rawURL, "/"), ".git")))
	return filepath.Join(m.dir, hex.EncodeToString(sum[:12])+".git")
}

// lock serialises the commands on one mirror.
func (m *Mirrors) lock(dir string) func() {
	m.mu.Lock()
	l := m.locks[dir]
	if l == nil {
		l = &sync.Mutex{}
		m.locks[dir] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Update clones the remote into its mirror, or fetches it, and returns the
// mirror's directory. Branches and tags are mirrored; deleted branches pruned.
func (m *Mirrors) Update(ctx context.Context, r Remote) (string, error) {
	if err := checkURL(r.URL); err != nil {
		return "", err
	}
	dir := m.mirrorDir(r.URL)
	defer m.lock(dir)()
	return dir, m.update(ctx, dir, r)
}

func (m *Mirrors) update(ctx context.Context, dir string, r Remote) error {
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err != nil {
		tmp := dir + ".tmp"
		_ = os.RemoveAll(tmp)
		if _, err := m.remote(ctx, m.dir, r, "clone", "--bare", "--quiet", "--no-tags", r.URL, tmp); err != nil {
			_ = os.RemoveAll(tmp)
			return err
		}
		for _, kv := range [][]string{
			{"remote.origin.fetch", "+refs/heads/*:refs/heads/*"},
			{"--add", "remote.origin.fetch", "+refs/tags/*:refs/tags/*"},
			{"gc.auto", "0"},
		} {
			if _, err := m.run(ctx, tmp, nil, nil, append([]string{"config"}, kv...)...); err != nil {
				_ = os.RemoveAll(tmp)
				return err
			}
		}
		if err := os.Rename(tmp, dir); err != nil {
			_ = os.RemoveAll(tmp)
			return fmt.Errorf("gitpush: install mirror: %w", err)
		}
	} else if _, err := m.run(ctx, dir, nil, nil, "remote", "set-url", "origin", r.URL); err != nil {
		return err
	}
	if _, err := m.remote(ctx, dir, r, "fetch", "--quiet", "--prune", "--no-write-fetch-head", "origin"); err != nil {
		return err
	}
	return m.prune(ctx, dir)
}

// remote runs a git command that talks to r: only its environment carries
// the token, read back by the askpass script.
func (m *Mirrors) remote(ctx context.Context, dir string, r Remote, args ...string) ([]byte, error) {
	user := r.Username
	if user == "" {
		user = DefaultUsername
	}
	env := []string{"GIT_ASKPASS=" + m.askpass, userEnv + "=" + user, tokenEnv + "=" + r.Token}
	args = append([]string{"-c", "credential.helper=", "-c", "core.askPass=" + m.askpass}, args...)
	out, cut, err := m.git.Output(ctx, gitexec.Cmd{Dir: dir, Args: args, Env: env, Redact: []string{r.Token}}, maxOutput)
	if err == nil && cut {
		err = fmt.Errorf("git %s: output exceeds %d bytes", gitexec.Verb(args), maxOutput)
	}
	return out, err
}

// run runs git with args in dir, extra added to the environment and stdin
// from in, and returns its standard output (at most maxOutput bytes; more is
// an error).
func (m *Mirrors) run(ctx context.Context, dir string, extra []string, in io.Reader, args ...string) ([]byte, error) {
	out, cut, err := m.git.Output(ctx, gitexec.Cmd{Dir: dir, Args: args, Env: extra, Stdin: in}, maxOutput)
	if err == nil && cut {
		err = fmt.Errorf("git %s: output exceeds %d bytes", gitexec.Verb(args), maxOutput)
	}
	return out, err
}

// stream is run with standard output into w.
func (m *Mirrors) stream(ctx context.Context, dir string, extra []string, in io.Reader, w io.Writer, args ...string) error {
	return m.git.Run(ctx, gitexec.Cmd{Dir: dir, Args: args, Env: extra, Stdin: in, Stdout: w})
}
