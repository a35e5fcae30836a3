package provider

// What each kind of step does, once for every provider: the one switch over step
// kinds, commands and their outcomes, the Requires lookup and the sidecar's wait.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// do runs the action of s: the one switch over step kinds.
func (r *Runner) do(ctx context.Context, s Step) (string, error) {
	switch s.Kind {
	case StepMkdir:
		return "", r.t.MkdirAll(ctx, s.Path, modeOr(s.Mode, 0o755))
	case StepWrite:
		return "", r.t.WriteFile(ctx, s.Path, []byte(s.Content), modeOr(s.Mode, 0o644))
	case StepTouch:
		p := ShellEscape(s.Path)
		return r.exec(ctx, Step{TimeoutMs: MkdirTimeout.Milliseconds(), Command: "test -e " + p + " || { mkdir -p -- " +
			ShellEscape(path.Dir(s.Path)) + " && : > " + p + " && chmod " + octal(modeOr(s.Mode, 0o644)) + " " + p + "; }"})
	case StepRemove:
		// Files and directories alike, recursively; a missing path is fine.
		quoted := make([]string, len(s.Paths))
		for i, p := range s.Paths {
			quoted[i] = ShellEscape(p)
		}
		return r.exec(ctx, Step{TimeoutMs: MkdirTimeout.Milliseconds(), Command: "rm -rf -- " + strings.Join(quoted, " ")})
	case StepRun:
		return r.exec(ctx, s)
	case StepStart:
		if err := r.t.StartDetached(ctx, s.Command, r.env(s.Env)); err != nil {
			return "", err
		}
		if s.Name == StepNameSandboxMCP {
			return "", r.waitSidecar(ctx)
		}
		return "", nil
	case StepGitBundle:
		// The host fetches with the token; the sandbox only ever sees a bundle.
		ctx, cancel := context.WithTimeout(ctx, s.Timeout())
		defer cancel()
		out, err := ExecGitBundle(ctx, targetExecutor{r}, r.o.GitMirrors, s)
		return RedactSecrets(CapOutput(out, stepOutputMax)), err
	case StepService:
		// What `proliferate services start` sends, sent by the host directly.
		cl, err := r.t.Sidecar()
		if err != nil {
			return "", err
		}
		ctx, cancel := context.WithTimeout(ctx, s.Timeout())
		defer cancel()
		_, err = cl.StartService(ctx, apitype.StartServiceRequest{Name: s.Service.Name, Command: s.Service.Command, Cwd: s.Service.Cwd})
		if err != nil {
			return "", fmt.Errorf("start service %q: %w", s.Service.Name, err)
		}
		return "", nil
	}
	return "", fmt.Errorf("unknown step kind %q", s.Kind)
}

// exec runs a command step; a non-zero exit is an error that quotes the output.
func (r *Runner) exec(ctx context.Context, s Step) (string, error) {
	timeout := s.Timeout()
	if timeout <= 0 {
		timeout = ExecTimeout
	}
	res, err := r.t.Exec(ctx, s.Command, r.env(s.Env), timeout)
	out := RedactSecrets(CapOutput(res.Stdout+res.Stderr, stepOutputMax))
	switch {
	case errors.Is(err, ErrExecTimeout):
		return out, fmt.Errorf("timed out after %s: %s", timeout, out)
	case err != nil:
		return out, err
	case res.ExitCode != 0:
		return out, fmt.Errorf("exit status %d: %s", res.ExitCode, out)
	}
	return out, nil
}

// env is the plan's environment with extra on top.
func (r *Runner) env(extra map[string]string) map[string]string {
	m := make(map[string]string, len(r.plan.Env)+len(extra))
	for k, v := range r.plan.Env {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// installed reports whether a step's program is in the sandbox: an absolute path
// must exist, a name must be found by command -v in the plan's PATH. Every program
// the plan requires is looked up at once, the first time one is needed: one command
// instead of one per program.
func (r *Runner) installed(ctx context.Context, prog string) (bool, error) {
	if r.have == nil {
		var progs []string
		seen := map[string]bool{}
		var add func(Step)
		add = func(s Step) {
			if s.Requires != "" && !seen[s.Requires] {
				seen[s.Requires] = true
				progs = append(progs, s.Requires)
			}
			if s.Fallback != nil {
				add(*s.Fallback)
			}
		}
		for _, s := range r.plan.Steps() {
			add(s)
		}
		if !seen[prog] {
			progs = append(progs, prog)
		}
		have, err := r.lookup(ctx, progs)
		if err != nil {
			return false, err
		}
		r.have = have
	}
	if v, ok := r.have[prog]; ok {
		return v, nil
	}
	have, err := r.lookup(ctx, []string{prog})
	if err != nil {
		return false, err
	}
	r.have[prog] = have[prog]
	return have[prog], nil
}

// lookup runs one command that prints 1 or 0 for each of progs.
func (r *Runner) lookup(ctx context.Context, progs []string) (map[string]bool, error) {
	var b strings.Builder
	for _, p := range progs {
		test := "command -v -- " + ShellEscape(p) + " >/dev/null 2>&1"
		if path.IsAbs(p) {
			test = "test -e " + ShellEscape(p)
		}
		b.WriteString("if " + test + "; then echo 1; else echo 0; fi; ")
	}
	res, err := r.t.Exec(ctx, b.String(), r.env(nil), ExecTimeout)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit status %d: %s", res.ExitCode, CapOutput(res.Stderr, 512))
	}
	if err != nil {
		return nil, err
	}
	lines := strings.Fields(res.Stdout)
	if len(lines) != len(progs) {
		return nil, fmt.Errorf("look up %d programs: got %q", len(progs), CapOutput(res.Stdout, 512))
	}
	have := make(map[string]bool, len(progs))
	for i, p := range progs {
		have[p] = lines[i] == "1"
	}
	return have, nil
}

// waitSidecar polls sandbox-mcp's health until it answers or the timeout passes; a
// sidecar that never answers is reported with the tail of its log.
func (r *Runner) waitSidecar(ctx context.Context) error {
	cl, err := r.t.Sidecar()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, r.o.SidecarTimeout)
	defer cancel()
	lastCheck := time.Now()
	for {
		pctx, pcancel := context.WithTimeout(wctx, sidecarProbeTimeout)
		_, err := cl.Health(pctx)
		pcancel()
		if err == nil {
			r.sidecarUp = true
			return nil
		}
		if r.o.Ended != nil && time.Since(lastCheck) >= time.Second {
			lastCheck = time.Now()
			if err := r.o.Ended(wctx); err != nil {
				// Nothing more to read from a sandbox that is gone.
				return fmt.Errorf("wait for sandbox-mcp: %w: %w", errSandboxEnded, err)
			}
		}
		select {
		case <-wctx.Done():
			lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), sidecarProbeTimeout)
			log, _ := r.t.ReadFile(lctx, r.o.SidecarLog)
			lcancel()
			return fmt.Errorf("wait for sandbox-mcp: %w (last: %v); log: %s", wctx.Err(), err,
				RedactSecrets(Tail(string(log), sidecarLogTail)))
		case <-time.After(SidecarPollInterval):
		}
	}
}

// targetExecutor is the Executor of the helpers of this package (git-bundle steps)
// over a runner's Target.
type targetExecutor struct{ r *Runner }

func (x targetExecutor) Run(ctx context.Context, command string, timeout time.Duration) (ExecResult, error) {
	res, err := x.r.t.Exec(ctx, command, x.r.env(nil), timeout)
	if errors.Is(err, ErrExecTimeout) {
		err = fmt.Errorf("timed out after %s", timeout)
	}
	return res, err
}

func (x targetExecutor) ReadFile(ctx context.Context, p string) ([]byte, error) {
	return x.r.t.ReadFile(ctx, p)
}

func (x targetExecutor) WriteFile(ctx context.Context, p string, data []byte, mode fs.FileMode) error {
	return x.r.t.WriteFile(ctx, p, data, modeOr(Mode(mode), 0o644))
}

// modeOr is m's permission bits, or def when m is zero.
func modeOr(m Mode, def fs.FileMode) fs.FileMode {
	if m == 0 {
		return def
	}
	return fs.FileMode(m).Perm()
}

func octal(m fs.FileMode) string { return "0" + strconv.FormatUint(uint64(m.Perm()), 8) }

// Tail is the end of s, at most n bytes, never starting inside a UTF-8 character:
// the part of an error or a log that says what went wrong.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
