// Package gitexec is the one way sandbox-mcp runs the git binary, on both
// sides: the sidecar's git leaf (internal/gitrepo) and the host's mirrors
// (provider/gitpush, gitbundle) build their commands here, so a
// repository's content or an inherited variable is handled the same wherever
// git runs.
//
// Every command:
//   - runs in its own process group, killed with everything git started when
//     its context ends or its timeout (Options.Timeout) strikes, and reaped;
//   - holds a slot of Options.MaxProcs while it runs (callers beyond it wait
//     within their context);
//   - keeps the first Options.MaxStderr bytes of stderr (capped) for
//     its error, never a limit that fails a git that merely talked a lot;
//   - starts with the BaseArgs, which keep a repository's own configuration
//     from running programs or changing the output's shape: no pager, no
//     fsmonitor, no hooks, no colour, paths unquoted, any owner accepted
//     (the sidecar may run as another user than the checkout's owner);
//   - gets the environment of Env, the policy below.
//
// # Environment policy
//
// Of the inherited environment, every GIT_* variable is dropped except the
// ones that say where the configuration files, the git helpers and the
// host's TLS settings are (GIT_CONFIG_GLOBAL, GIT_CONFIG_SYSTEM,
// GIT_CONFIG_NOSYSTEM, GIT_EXEC_PATH, GIT_SSL_*): the others could point git
// at another repository or object store (GIT_DIR, GIT_OBJECT_DIRECTORY, …),
// inject configuration (GIT_CONFIG_COUNT, GIT_CONFIG_PARAMETERS), answer
// prompts (GIT_ASKPASS) or trace secrets to a file (GIT_TRACE_CURL). PAGER,
// SSH_ASKPASS and the names in Options.Unset are dropped too. Then prompts
// are off, optional locks off (status never fights the agent's own git for
// index.lock), the pager is cat, pathspecs are literal, replace refs are
// ignored and askpass answers nothing. A Cmd's own Env comes last and wins:
// that is how one command gets a quarantine object directory or a token.
package gitexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/capped"
)

// Defaults.
const (
	DefaultTimeout   = 5 * time.Minute
	DefaultMaxStderr = 8192
)

// BaseArgs come before every command's arguments.
var BaseArgs = []string{
	"--no-pager",
	"-c", "core.fsmonitor=false",
	"-c", "core.hooksPath=" + os.DevNull,
	"-c", "core.quotepath=off",
	"-c", "color.ui=never",
	"-c", "safe.directory=*",
}

// keptGit are the inherited GIT_* variables Env keeps.
var keptGit = map[string]bool{
	"GIT_CONFIG_GLOBAL": true, "GIT_CONFIG_SYSTEM": true, "GIT_CONFIG_NOSYSTEM": true, "GIT_EXEC_PATH": true,
}

// fixedEnv is set on every command, after the inherited variables.
var fixedEnv = []string{
	"GIT_TERMINAL_PROMPT=0",
	"GIT_OPTIONAL_LOCKS=0",
	"GIT_PAGER=cat",
	"PAGER=cat",
	"GIT_LITERAL_PATHSPECS=1",
	"GIT_NO_REPLACE_OBJECTS=1",
	"GIT_ASKPASS=true",
}

// Env is the environment policy of the package doc applied to environ, with
// the names in unset dropped as well.
func Env(environ, unset []string) []string {
	env := make([]string, 0, len(environ)+len(fixedEnv))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "GIT_") && !keptGit[k] && !strings.HasPrefix(k, "GIT_SSL_"):
		case k == "PAGER" || k == "SSH_ASKPASS":
		case contains(unset, k):
		default:
			env = append(env, kv)
		}
	}
	return append(env, fixedEnv...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Options configures a Runner.
type Options struct {
	// Git is the git binary; default "git" looked up on PATH.
	Git string
	// Timeout bounds each command; default DefaultTimeout.
	Timeout time.Duration
	// MaxProcs bounds the commands running at once; 0 means no bound.
	MaxProcs int
	// MaxStderr is how much of stderr an error keeps; default DefaultMaxStderr.
	MaxStderr int
	// Environ is the inherited environment; default os.Environ().
	Environ []string
	// Unset names more variables to drop (a caller's own secrets).
	Unset []string
}

// Runner runs git commands under one policy. Safe for concurrent use.
type Runner struct {
	git       string
	timeout   time.Duration
	maxStderr int
	env       []string
	procs     chan struct{}
}

// New checks opts, finds git and returns a Runner.
func New(opts Options) (*Runner, error) {
	if opts.Git == "" {
		opts.Git = "git"
	}
	git, err := exec.LookPath(opts.Git)
	if err != nil {
		return nil, fmt.Errorf("find git: %w", err)
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxStderr <= 0 {
		opts.MaxStderr = DefaultMaxStderr
	}
	if opts.MaxProcs < 0 {
		return nil, fmt.Errorf("gitexec: MaxProcs %d is negative", opts.MaxProcs)
	}
	if opts.Environ == nil {
		opts.Environ = os.Environ()
	}
	r := &Runner{git: git, timeout: opts.Timeout, maxStderr: opts.MaxStderr, env: Env(opts.Environ, opts.Unset)}
	if opts.MaxProcs > 0 {
		r.procs = make(chan struct{}, opts.MaxProcs)
	}
	return r, nil
}

// Timeout is the bound of each command.
func (r *Runner) Timeout() time.Duration { return r.timeout }

// Cmd is one git command.
type Cmd struct {
	// Dir is where git runs.
	Dir string
	// Args follow BaseArgs; Args[0] (after any -c pairs) names the command in errors.
	Args []string
	// Env is added to the policy's environment and wins over it.
	Env []string
	// Stdin is git's standard input; nil means none.
	Stdin io.Reader
	// Stdout receives git's standard output; nil discards it (Run only).
	Stdout io.Writer
	// Redact are secrets replaced by [REDACTED] in the error's text.
	Redact []string
}

// Error is a git command that did not succeed.
type Error struct {
	// Verb is the git command (status, fetch, …).
	Verb string
	Dir  string
	// Err is why: an *exec.ExitError, a context error, or a start error.
	Err error
	// Stderr is the start of what git wrote to stderr, secrets redacted.
	Stderr string
	// Limit is the timeout when it struck, else 0.
	Limit time.Duration
}

func (e *Error) Error() string {
	if e.Limit > 0 {
		return fmt.Sprintf("git %s in %s: %v (limit %s)", e.Verb, e.Dir, e.Err, e.Limit)
	}
	if e.Stderr == "" {
		return fmt.Sprintf("git %s in %s: %v", e.Verb, e.Dir, e.Err)
	}
	return fmt.Sprintf("git %s in %s: %v: %s", e.Verb, e.Dir, e.Err, e.Stderr)
}

// Unwrap is the cause.
func (e *Error) Unwrap() error { return e.Err }

// ExitCode is git's exit code, -1 when it did not exit by itself.
func (e *Error) ExitCode() int {
	var ee *exec.ExitError
	if errors.As(e.Err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// Exited reports whether err is git having run and exited non-zero (a
// "no" answer, a refused input), as opposed to a timeout or a start failure.
func Exited(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.ExitCode() > 0
}

// Verb is the git command of args, skipping -c pairs and options.
func Verb(args []string) string {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-c" || args[i] == "-C":
			i++
		case strings.HasPrefix(args[i], "-"):
		default:
			return args[i]
		}
	}
	return ""
}

// proc is one started command: its slot, timeout and stderr.
type proc struct {
	*exec.Cmd
	ctx     context.Context
	c       Cmd
	stderr  *capped.Buffer
	release func()
}

// command takes a slot and builds c, not started.
func (r *Runner) command(ctx context.Context, c Cmd) (*proc, error) {
	verb := Verb(c.Args)
	if r.procs != nil {
		select {
		case r.procs <- struct{}{}:
		case <-ctx.Done():
			return nil, &Error{Verb: verb, Dir: c.Dir, Err: ctx.Err()}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	cmd := exec.CommandContext(ctx, r.git, append(append([]string{}, BaseArgs...), c.Args...)...)
	cmd.Dir = c.Dir
	cmd.Env = append(append(make([]string, 0, len(r.env)+len(c.Env)), r.env...), c.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = time.Second
	p := &proc{Cmd: cmd, ctx: ctx, c: c, stderr: &capped.Buffer{Max: r.maxStderr}}
	cmd.Stderr = p.stderr
	cmd.Stdin = c.Stdin
	p.release = func() {
		cancel()
		if r.procs != nil {
			<-r.procs
		}
	}
	return p, nil
}

// failure is the *Error of a command that ended with werr, nil for success.
func (r *Runner) failure(p *proc, werr error) error {
	e := &Error{Verb: Verb(p.c.Args), Dir: p.c.Dir}
	switch {
	case p.ctx.Err() != nil && werr != nil:
		e.Err = p.ctx.Err()
		if errors.Is(e.Err, context.DeadlineExceeded) {
			e.Limit = r.timeout
		}
	case werr != nil:
		e.Err = werr
		e.Stderr = strings.TrimSpace(p.stderr.String())
		for _, s := range p.c.Redact {
			if s != "" {
				e.Stderr = strings.ReplaceAll(e.Stderr, s, "[REDACTED]")
			}
		}
	default:
		return nil
	}
	return e
}

// Run runs c to its end.
func (r *Runner) Run(ctx context.Context, c Cmd) error {
	p, err := r.command(ctx, c)
	if err != nil {
		return err
	}
	defer p.release()
	p.Stdout = c.Stdout
	return r.failure(p, p.Run())
}

// Output runs c and returns at most limit bytes of its standard output; cut
// reports that there was more, in which case git is killed instead of being
// read to the end (and no error is returned for it).
func (r *Runner) Output(ctx context.Context, c Cmd, limit int) (out []byte, cut bool, err error) {
	p, err := r.command(ctx, c)
	if err != nil {
		return nil, false, err
	}
	defer p.release()
	stdout, err := p.StdoutPipe()
	if err != nil {
		return nil, false, fmt.Errorf("git %s: %w", Verb(c.Args), err)
	}
	if err := p.Start(); err != nil {
		return nil, false, &Error{Verb: Verb(c.Args), Dir: c.Dir, Err: err}
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
	if err := r.failure(p, werr); err != nil {
		return nil, false, err
	}
	if rerr != nil {
		return nil, false, fmt.Errorf("read git %s output: %w", Verb(c.Args), rerr)
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
