package coderun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// denoArgv is the REPL server's command line: Deno's permission flags are the second
// wall inside the sandbox. Network: the allowed hosts and the server's own loopback
// port; environment: the secrets' names only; files: read the dependency directory
// and /workspace, write /workspace; no subprocesses, no FFI; never `deno eval`.
func (r *Runner) denoArgv() []string {
	names, _ := r.cfg.secretEnv()
	net := append([]string{"127.0.0.1:" + strconv.Itoa(rules.PortCoderunREPL)}, r.cfg.AllowedHosts()...)
	argv := []string{rules.CoderunDeno, "run", "--no-prompt", "--cached-only", "--node-modules-dir=manual",
		"--allow-net=" + strings.Join(net, ","),
		"--allow-read=" + rules.CoderunWorkspace + "," + rules.CoderunDepsDir,
		"--allow-write=" + rules.CoderunWorkspace,
		"--v8-flags=--max-old-space-size=" + strconv.Itoa(r.cfg.MemoryMB)}
	if len(names) > 0 {
		argv = append(argv, "--allow-env="+strings.Join(names, ","))
	}
	return append(argv, rules.CoderunREPL, strconv.Itoa(rules.PortCoderunREPL), rules.CoderunWorkspace)
}

// replStartTimeout bounds the REPL server's start (Deno loading its packages).
const replStartTimeout = 30 * time.Second

// startREPL starts the REPL server detached in the sandbox and waits until it answers;
// it returns its pid inside the sandbox. The secrets are in the environment of that
// process only: setsid forks and execs it through sh's exec, so no other process of
// the sandbox has them.
// cwd is /workspace in a session (relative paths in code mean the workspace).
func (r *Runner) startREPL(ctx context.Context, sandbox, cwd string, secrets []string) (int, error) {
	argv := append([]string{"setsid", "-f", "sh", "-c", `exec "$@" </dev/null >` + rules.CoderunREPLLog + ` 2>&1`, "sh"}, r.denoArgv()...)
	env := append([]string{"DENO_DIR=" + rules.CoderunDenoDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}, secrets...)
	var out bytes.Buffer
	code, err := r.eng.Exec(ctx, sandbox, engine.ExecRequest{Argv: argv, Cwd: cwd, Env: env,
		Timeout: 30 * time.Second, Stdout: &out, Stderr: &out})
	if err != nil {
		return 0, fmt.Errorf("start the REPL: %w", err)
	}
	if code != 0 {
		return 0, fmt.Errorf("start the REPL: exit code %d: %s", code, tail(out.String(), 1000))
	}
	deadline := time.Now().Add(replStartTimeout)
	for {
		pid, err := r.hello(ctx, sandbox)
		if err == nil {
			return pid, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return 0, fmt.Errorf("start the REPL: not answering after %v: %v; its log: %s", replStartTimeout, err, r.replLog(ctx, sandbox))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hello asks the REPL server for its pid.
func (r *Runner) hello(ctx context.Context, sandbox string) (int, error) {
	c, err := r.eng.DialPort(ctx, sandbox, rules.PortCoderunREPL)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(`{"op":"hello"}` + "\n")); err != nil {
		return 0, err
	}
	var h struct {
		Pid int `json:"pid"`
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return 0, err
	}
	if err := json.Unmarshal(line, &h); err != nil || h.Pid <= 0 {
		return 0, fmt.Errorf("bad hello %q", line)
	}
	return h.Pid, nil
}

// replLog is the tail of the REPL server's log.
func (r *Runner) replLog(ctx context.Context, sandbox string) string {
	b, err := r.eng.ReadFile(ctx, sandbox, rules.CoderunREPLLog)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return tail(strings.TrimSpace(string(b)), 2000)
}

// maxResponse caps one REPL answer (result and stdout).
const maxResponse = 16 << 20

// eval sends code to the REPL server. alive is false when the REPL is gone (it
// crashed, ran out of memory, or was killed after the timeout); the next call starts a
// new one.
func (r *Runner) eval(ctx context.Context, st sessionState, code string) (res RunResult, alive bool) {
	c, err := r.eng.DialPort(ctx, st.Sandbox, rules.PortCoderunREPL)
	if err != nil {
		return RunResult{Error: "the REPL is not reachable (it will be restarted on the next call): " + err.Error()}, false
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(r.cfg.Timeout))
	req, _ := json.Marshal(map[string]string{"code": code})
	if _, err := c.Write(append(req, '\n')); err != nil {
		return RunResult{Error: "send code to the REPL: " + err.Error()}, false
	}
	line, err := bufio.NewReaderSize(io.LimitReader(c, maxResponse), 64<<10).ReadBytes('\n')
	if err == io.EOF && len(line) >= maxResponse {
		r.killREPL(context.WithoutCancel(ctx), st)
		return RunResult{Error: fmt.Sprintf("the answer is over %d MB; the REPL was restarted and earlier variables are gone", maxResponse>>20)}, false
	}
	if err == nil {
		if jerr := json.Unmarshal(line, &res); jerr != nil {
			return RunResult{Error: "bad answer from the REPL: " + jerr.Error()}, true
		}
		return res, true
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		r.killREPL(context.WithoutCancel(ctx), st)
		msg := fmt.Sprintf("timed out after %v (timeout_seconds); the REPL was restarted and earlier variables are gone", r.cfg.Timeout)
		if ctx.Err() != nil {
			msg = "cancelled: " + ctx.Err().Error() + "; the REPL was restarted and earlier variables are gone"
		}
		return RunResult{Error: msg}, false
	}
	return RunResult{Error: r.crashReason(ctx, st)}, false
}

// crashReason explains why the REPL went away.
func (r *Runner) crashReason(ctx context.Context, st sessionState) string {
	log := r.replLog(ctx, st.Sandbox)
	after := "; the REPL was restarted and earlier variables are gone"
	if strings.Contains(log, "out of memory") || strings.Contains(log, "heap limit") {
		return fmt.Sprintf("out of memory: the code used more than memory_mb (%d MB)%s", r.cfg.MemoryMB, after)
	}
	if info, err := r.eng.Get(ctx, st.Sandbox); err != nil || info.State != engine.StateRunning {
		return "the sandbox is gone (a new one starts on the next call)"
	}
	if log == "" {
		return fmt.Sprintf("the REPL was killed, most likely for using more than the sandbox's memory (memory_mb = %d)%s", r.cfg.MemoryMB, after)
	}
	return "the REPL exited: " + log + after
}

// killREPL kills the REPL server (after a timeout: an endless loop cannot be
// interrupted from inside).
func (r *Runner) killREPL(ctx context.Context, st sessionState) {
	if st.Pid <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := r.eng.Exec(ctx, st.Sandbox, engine.ExecRequest{Argv: []string{"sh", "-c", "kill -9 " + strconv.Itoa(st.Pid)}, Timeout: 5 * time.Second})
	if err != nil {
		r.log.Warn("kill the REPL", "sandbox", st.Sandbox, "err", err)
	}
}
