package coderun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// denoArgv is the REPL server's command line: Deno's permission flags are the second
// wall inside the sandbox. Network: the allowed hosts and the server's own loopback
// port; environment: the secrets' names only (their placeholders); files: read the dependency directory
// and /workspace, write /workspace; no subprocesses, no FFI; never `deno eval`.
func (r *Runner) denoArgv() []string {
	names := r.cfg.secretNames()
	net := append([]string{"127.0.0.1:" + strconv.Itoa(rules.PortCoderunREPL)}, r.cfg.AllowedHosts()...)
	argv := []string{rules.CoderunDeno, "run", "--no-prompt", "--cached-only", "--node-modules-dir=manual",
		"--allow-net=" + strings.Join(net, ","),
		"--allow-read=" + rules.CoderunWorkspace + "," + rules.CoderunDepsDir,
		"--allow-write=" + rules.CoderunWorkspace,
		"--v8-flags=--max-old-space-size=" + strconv.Itoa(r.cfg.MemoryMB)}
	if len(names) > 0 {
		argv = append(argv, "--allow-env="+strings.Join(names, ","))
	}
	argv = append(argv, r.importMapFlag(), rules.CoderunREPL, strconv.Itoa(rules.PortCoderunREPL), rules.CoderunWorkspace)
	// What the sandbox allows, for the REPL's error messages.
	var pkgs []string
	for _, d := range r.cfg.Dependencies {
		pkgs = append(pkgs, d.Package)
	}
	allowed, _ := json.Marshal(map[string][]string{"hosts": nonNil(r.cfg.AllowedHosts()), "env": nonNil(names), "packages": nonNil(pkgs)})
	return append(argv, string(allowed))
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// importMapFlag maps the configured packages' bare names (and their subpaths) to the
// dependency directory's node_modules for every module, not only the REPL's: a module
// saved under /workspace imports them by name too. The map is a data URL, so the
// snapshot holds no file for it.
func (r *Runner) importMapFlag() string {
	imports := map[string]string{}
	for _, d := range r.cfg.Dependencies {
		imports[d.Package] = "npm:" + d.Package
		imports[d.Package+"/"] = "npm:/" + d.Package + "/"
	}
	b, _ := json.Marshal(map[string]any{"imports": imports})
	return "--import-map=data:application/json;base64," + base64.StdEncoding.EncodeToString(b)
}

// replStartTimeout bounds the REPL server's start (Deno loading its packages).
const replStartTimeout = 30 * time.Second

// startREPL starts the REPL server detached in the sandbox and waits until it answers;
// it returns its pid inside the sandbox. The secrets' placeholders and the trust of
// the sandbox's egress authority (DENO_CERT) are in the environment the engine gives
// every exec (Spec.Secrets); the values are nowhere in the sandbox.
// cwd is /workspace in a session (relative paths in code mean the workspace).
func (r *Runner) startREPL(ctx context.Context, sandbox, cwd string) (int, error) {
	argv := append([]string{"setsid", "-f", "sh", "-c", `exec "$@" </dev/null >` + rules.CoderunREPLLog + ` 2>&1`, "sh"}, r.denoArgv()...)
	env := []string{"DENO_DIR=" + rules.CoderunDenoDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}
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

// maxResponse caps what the REPL sends for one call (its answer and the stdout it
// streams). The REPL keeps both within the output budget; this is the backstop.
const maxResponse = 16 << 20

// evalRequest is a request line of the REPL server.
type evalRequest struct {
	Code string `json:"code"`
	// Budget is the output budget in bytes of JSON.
	Budget int `json:"budget"`
	// Out is the path, without extension, of the files that keep the whole stdout
	// (.stdout.txt) and result (.result.json) when the answer is cut; "" keeps none.
	Out string `json:"out,omitempty"`
}

// eval sends code to the REPL server with the configured budget and no output files.
func (r *Runner) eval(ctx context.Context, st sessionState, code string) (res RunResult, alive bool) {
	return r.evalStream(ctx, st, evalRequest{Code: code, Budget: r.cfg.outputBudget()}, nil)
}

// evalStream sends a request to the REPL server; progress, when set, receives the
// stdout the REPL streams while the code runs. alive is false when the REPL is gone
// (it crashed, ran out of memory, or was killed after the timeout); the next call
// starts a new one. After a timeout, the stdout printed before it is in the result.
func (r *Runner) evalStream(ctx context.Context, st sessionState, req evalRequest, progress func(string)) (res RunResult, alive bool) {
	c, err := r.eng.DialPort(ctx, st.Sandbox, rules.PortCoderunREPL)
	if err != nil {
		return RunResult{Error: "the REPL is not reachable (it will be restarted on the next call): " + err.Error()}, false
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(r.cfg.Timeout))
	line, _ := json.Marshal(req)
	if _, err := c.Write(append(line, '\n')); err != nil {
		return RunResult{Error: "send code to the REPL: " + err.Error()}, false
	}
	br := bufio.NewReaderSize(io.LimitReader(c, maxResponse), 64<<10)
	var streamed strings.Builder
	for {
		line, err := br.ReadBytes('\n')
		if err == nil {
			var m struct {
				Stdout  *string `json:"stdout"`
				Success *bool   `json:"success"`
			}
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				return RunResult{Error: "bad answer from the REPL: " + jerr.Error()}, true
			}
			if m.Success == nil {
				if m.Stdout != nil {
					streamed.WriteString(*m.Stdout)
					if progress != nil {
						progress(*m.Stdout)
					}
				}
				continue
			}
			if jerr := json.Unmarshal(line, &res); jerr != nil {
				return RunResult{Error: "bad answer from the REPL: " + jerr.Error()}, true
			}
			return res, true
		}
		after := "; the REPL was restarted and earlier variables are gone"
		if errors.Is(err, io.EOF) && streamed.Len()+len(line) >= maxResponse {
			r.killREPL(context.WithoutCancel(ctx), st)
			return RunResult{Error: fmt.Sprintf("the answer is over %d MB%s", maxResponse>>20, after)}, false
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			r.killREPL(context.WithoutCancel(ctx), st)
			msg := fmt.Sprintf("timed out after %v (timeout_seconds)%s", r.cfg.Timeout, after)
			if ctx.Err() != nil {
				msg = "cancelled: " + ctx.Err().Error() + after
			}
			res := RunResult{Error: msg, Stdout: streamed.String()}
			r.stdoutFile(context.WithoutCancel(ctx), st, req, &res)
			return res, false
		}
		return RunResult{Error: r.crashReason(ctx, st), Stdout: streamed.String()}, false
	}
}

// stdoutFile puts the head and the tail of the live stdout file of a call the REPL
// did not answer (it was killed) into res, and keeps the file as <Out>.stdout.txt: the
// REPL writes the stdout of the call in progress there as it is printed.
func (r *Runner) stdoutFile(ctx context.Context, st sessionState, req evalRequest, res *RunResult) {
	if req.Out == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	live, name := path.Join(path.Dir(req.Out), "stdout.live"), req.Out+".stdout.txt"
	code, err := r.eng.Exec(ctx, st.Sandbox, engine.ExecRequest{Argv: []string{"mv", "-f", live, name}, Timeout: 5 * time.Second})
	if err != nil || code != 0 {
		return
	}
	b, err := r.eng.ReadFile(ctx, st.Sandbox, name)
	if err != nil || len(b) < len(res.Stdout) {
		return
	}
	res.Stdout = headTail(string(b), req.Budget, name)
	if len(b) > req.Budget {
		res.Truncated = &Truncation{StdoutBytes: int64(len(b)), StdoutFile: name}
	}
}

// headTail is s within about n bytes: whole, or a head and a tail around a note that
// says how much was left out and where the whole is.
func headTail(s string, n int, where string) string {
	if len(s) <= n {
		return s
	}
	room := max(n-200, 0)
	head := validPrefix(s[:room*6/10])
	tail := s[len(s)-(room-len(head)):]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	return fmt.Sprintf("%s\n… [%d of %d bytes left out here; the whole is in %s] …\n%s", head, len(s)-len(head)-len(tail), len(s), where, tail)
}

// validPrefix drops a rune cut at the end of s.
func validPrefix(s string) string {
	for i := 0; i < utf8.UTFMax && len(s) > 0; i++ {
		if r, size := utf8.DecodeLastRuneInString(s); r != utf8.RuneError || size > 1 {
			return s
		}
		s = s[:len(s)-1]
	}
	return s
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
	// It is gone (or a zombie, its port free) before the next REPL binds the port.
	script := `kill -9 "$0"; i=0; while [ $i -lt 300 ] && [ -e /proc/$0 ] && [ "$(cut -d' ' -f3 /proc/$0/stat 2>/dev/null)" != Z ]; do sleep 0.01; i=$((i+1)); done`
	_, err := r.eng.Exec(ctx, st.Sandbox, engine.ExecRequest{Argv: []string{"sh", "-c", script, strconv.Itoa(st.Pid)}, Timeout: 5 * time.Second})
	if err != nil {
		r.log.Warn("kill the REPL", "sandbox", st.Sandbox, "err", err)
	}
}
