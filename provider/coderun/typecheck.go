package coderun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// typecheckTimeout bounds one `deno check`.
const typecheckTimeout = 2 * time.Minute

// typecheck runs `deno check` on a snippet in the session's sandbox, against the
// packages' own type declarations. The REPL writes the file to check: the snippet, then
// `declare var` of the globals earlier snippets declared (their types are not known,
// so any), so that a snippet using them checks. A snippet with errors is a RunResult
// whose Error lists the diagnostics with the snippet's lines; one without is the zero
// RunResult.
func (r *Runner) typecheck(ctx context.Context, st sessionState, code string) (RunResult, error) {
	ans, err := r.replOp(ctx, st, map[string]string{"op": "check", "code": code})
	if err != nil {
		return RunResult{}, fmt.Errorf("type-check: %w", err)
	}
	if ans.Error != "" {
		return RunResult{Error: ans.Error}, nil
	}
	if !strings.HasPrefix(ans.Path, rules.CoderunWorkspace+"/.check-") {
		return RunResult{}, fmt.Errorf("type-check: the REPL wrote %q", ans.Path)
	}
	var out bytes.Buffer
	script := `"$0" check --quiet --no-lock --node-modules-dir=manual --cached-only "$1" "$2"; rc=$?; rm -f "$2"; exit $rc`
	code2, err := r.eng.Exec(ctx, st.Sandbox, engine.ExecRequest{
		Argv: []string{"sh", "-c", script, rules.CoderunDeno, r.importMapFlag(), ans.Path},
		// From the dependency directory: Deno finds node_modules there (and no
		// configuration of the model's in /workspace changes the check).
		Cwd: rules.CoderunDepsDir, Env: []string{"DENO_DIR=" + rules.CoderunDenoDir, "NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"},
		Timeout: typecheckTimeout, Stdout: &out, Stderr: &out})
	if err != nil {
		return RunResult{}, fmt.Errorf("type-check: %w", err)
	}
	if code2 == 0 {
		return RunResult{}, nil
	}
	diag := diagnostics(out.String(), ans.Path)
	return RunResult{Error: headTail("type errors (the code did not run; run it with typecheck off to skip the check):\n"+diag,
		r.cfg.outputBudget()/2, "the diagnostics above")}, nil
}

// checkFrame is the location line of a diagnostic in the checked file.
var checkFrame = regexp.MustCompile(`file://(/[^\s:]+):(\d+):(\d+)`)

// diagnostics rewrites deno check's output for the model: locations in the checked
// file are lines and columns of the snippet, those of /workspace modules are paths,
// and the closing summary goes.
func diagnostics(out, path string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "error: Type checking failed") || strings.HasPrefix(line, "Found ") && strings.HasSuffix(line, " errors.") ||
			line == "Stack backtrace:" || strings.HasPrefix(line, "   0: ") {
			continue
		}
		line = checkFrame.ReplaceAllStringFunc(line, func(m string) string {
			sm := checkFrame.FindStringSubmatch(m)
			if sm[1] == path {
				return "line " + sm[2] + ", column " + sm[3]
			}
			return sm[1] + ":" + sm[2] + ":" + sm[3]
		})
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return strings.TrimSpace(b.String())
}

// replAnswer is the REPL server's answer to an op.
type replAnswer struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

// replOp sends one op line to the REPL server and reads its answer.
func (r *Runner) replOp(ctx context.Context, st sessionState, op any) (replAnswer, error) {
	c, err := r.eng.DialPort(ctx, st.Sandbox, rules.PortCoderunREPL)
	if err != nil {
		return replAnswer{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	b, _ := json.Marshal(op)
	if _, err := c.Write(append(b, '\n')); err != nil {
		return replAnswer{}, err
	}
	line, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return replAnswer{}, err
	}
	var a replAnswer
	if err := json.Unmarshal(line, &a); err != nil {
		return replAnswer{}, fmt.Errorf("bad answer from the REPL %q: %w", line, err)
	}
	return a, nil
}
