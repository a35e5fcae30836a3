package provider

import (
	"context"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// ShellEscape quotes s for a POSIX shell: it wraps s in single quotes and turns every
// single quote inside into the four characters quote, backslash, quote, quote (close,
// escaped quote, reopen). Every command string this package builds goes through it.
func ShellEscape(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// TruncatedMarker is appended by CapOutput when it cuts the output.
const TruncatedMarker = "\n...[truncated]"

// CapOutput returns output unchanged when it is at most maxBytes long (maxBytes <= 0
// means DefaultCapOutput); otherwise its first maxBytes bytes plus TruncatedMarker.
//
// The old code counted UTF-16 units. This counts bytes, the unit the limit protects,
// and backs off to the start of a UTF-8 character so the result is always valid text:
// a cut never splits a character, so a multi-byte output may keep up to 3 bytes fewer.
func CapOutput(output string, maxBytes int) string {
	if maxBytes <= 0 {
		maxBytes = DefaultCapOutput
	}
	if len(output) <= maxBytes {
		return output
	}
	return truncateUTF8(output, maxBytes) + TruncatedMarker
}

// truncateUTF8 returns the longest prefix of s of at most n bytes that ends on a
// character boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// parseJSNumber is the subset of JavaScript's Number() that env settings use: blanks
// are 0 (rejected by callers through ok=false), decimals, fractions and exponents are
// accepted, Infinity and NaN are not.
func parseJSNumber(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// ceilSeconds is ceil(d / 1s), the unit of the coreutils `timeout` wrapper.
func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// BuildE2BExecCommand is execCommand for shell-string SDKs: argv is wrapped in
// `timeout <ceil(seconds)>`, every word shell-escaped, and prefixed by a cd when cwd
// is set. timeout <= 0 means ExecTimeout. Exit code 124 means the timeout fired.
func BuildE2BExecCommand(argv []string, cwd string, timeout time.Duration) string {
	if timeout <= 0 {
		timeout = ExecTimeout
	}
	words := append([]string{"timeout", strconv.FormatInt(ceilSeconds(timeout), 10)}, argv...)
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = ShellEscape(w)
	}
	cmd := strings.Join(quoted, " ")
	if cwd != "" {
		return "cd " + ShellEscape(cwd) + " && " + cmd
	}
	return cmd
}

// EnvPair is one KEY=VALUE of an ordered environment.
type EnvPair struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// BuildModalExecArgv is execCommand for argv SDKs: `timeout <s> argv...`, prefixed by
// `env K=V...` when env is non-empty and wrapped in a constant `sh -c` script that
// takes cwd as a positional argument, so no value is ever interpolated into a script.
func BuildModalExecArgv(argv []string, cwd string, env []EnvPair, timeout time.Duration) []string {
	if timeout <= 0 {
		timeout = ExecTimeout
	}
	out := append([]string{"timeout", strconv.FormatInt(ceilSeconds(timeout), 10)}, argv...)
	if len(env) > 0 {
		pre := []string{"env"}
		for _, kv := range env {
			pre = append(pre, kv.Key+"="+kv.Value)
		}
		out = append(pre, out...)
	}
	if cwd != "" {
		out = append([]string{"sh", "-c", `cd "$1" && shift && exec "$@"`, "--", cwd}, out...)
	}
	return out
}

// ServiceSlug is a service name made safe for a file name: every character outside
// [a-zA-Z0-9_-] becomes '_' and the result is cut to 40 characters.
func ServiceSlug(name string) string {
	var b strings.Builder
	n := 0
	for _, r := range name {
		if n == 40 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		n++
	}
	return b.String()
}

// ServiceTestLogFile is the log file of the index-th command of a service test run.
func (p Paths) ServiceTestLogFile(runID string, index int, name string) string {
	return p.Tmp + "/auto-start-test-" + runID + "-" + strconv.Itoa(index) + "-" + ServiceSlug(name) + ".log"
}

// BuildServiceTestCommand runs command in cwd with its output in logFile, prints the
// log and exits with the command's code. A positive timeout adds a coreutils
// `timeout` wrapper (the argv-SDK flavour); zero leaves the limit to the SDK.
func BuildServiceTestCommand(cwd, command, logFile string, timeout time.Duration) string {
	run := "sh -c " + ShellEscape(command)
	if timeout > 0 {
		run = "timeout " + strconv.FormatInt(ceilSeconds(timeout), 10) + " " + run
	}
	lf := ShellEscape(logFile)
	return "cd " + ShellEscape(cwd) + " && " + run + " > " + lf + " 2>&1; EXIT_CODE=$?; cat " + lf + "; exit $EXIT_CODE"
}

// RunServiceTests runs cmds one after another (§15.8): each in its repo
// directory (ServiceCwd) with its output in a log file under paths.Tmp
// (ServiceTestLogFile), through run, which runs one shell script in the
// sandbox (BuildServiceTestCommand) and bounds it as the engine does. A
// command that ran reports its capped output and exit code; one that could
// not run, exit code 1 and the redacted error.
func RunServiceTests(ctx context.Context, paths Paths, cmds []ConfigurationServiceCommand, runID string,
	run func(ctx context.Context, cwd, command, logFile string) (ExecResult, error)) []ServiceTestResult {
	out := make([]ServiceTestResult, 0, len(cmds))
	for i, c := range cmds {
		cwd := ServiceCwd(paths, c.WorkspacePath, c.Cwd)
		logFile := paths.ServiceTestLogFile(runID, i, c.Name)
		res := ServiceTestResult{Name: c.Name, WorkspacePath: c.WorkspacePath, Cwd: cwd, LogFile: logFile}
		r, err := run(ctx, cwd, c.Command, logFile)
		code := r.ExitCode
		if err != nil {
			res.Output, code = RedactSecrets(err.Error()), 1
		} else {
			res.Output = CapOutput(r.Stdout+r.Stderr, DefaultCapOutput)
		}
		res.ExitCode = &code
		out = append(out, res)
	}
	return out
}

// ServiceCwd is where a service command runs: the repo of workspacePath ("" and "."
// are the workspace itself), joined with cwd when cwd is set.
func ServiceCwd(p Paths, workspacePath, cwd string) string {
	base := p.Workspace()
	if workspacePath != "" && workspacePath != "." {
		base = p.Workspace() + "/" + workspacePath
	}
	if cwd != "" {
		return base + "/" + cwd
	}
	return base
}

// BuildCloneCommand is `git clone --depth 1 [--branch <branch>] <url> <dir>`, every
// value shell-escaped (the old code put the URL, which carries the token, in raw single
// quotes, so a quote in a token broke the command).
func BuildCloneCommand(cloneURL, branch, targetDir string) string {
	cmd := "git clone --depth 1"
	if branch != "" {
		cmd += " --branch " + ShellEscape(branch)
	}
	return cmd + " " + ShellEscape(cloneURL) + " " + ShellEscape(targetDir)
}

// AuthenticatedCloneURL puts token into the first https:// of repoURL as
// x-access-token credentials; other schemes and empty tokens are returned as they are.
func AuthenticatedCloneURL(repoURL, token string) string {
	if token == "" {
		return repoURL
	}
	return strings.Replace(repoURL, "https://", "https://x-access-token:"+token+"@", 1)
}

// BuildPullCommand is the fast-forward-only pull of one repo on restore.
func BuildPullCommand(targetDir string) string {
	return "cd " + ShellEscape(targetDir) + " && git " + gitSafeDirectory + " pull --ff-only 2>&1"
}

// gitSafeDirectory is the option of the plan's git commands in an existing checkout:
// the plan runs as root, and an image may own the workspace folder by the sandbox
// user (image.Default does), which git refuses as "dubious ownership" (the sidecar's
// git runs with the same option).
const gitSafeDirectory = "-c 'safe.directory=*'"

// BuildEnvApplyCommand is `proliferate env apply --spec <json>`.
func BuildEnvApplyCommand(specJSON string) string {
	return "proliferate env apply --spec " + ShellEscape(specJSON)
}

// BuildServiceStartCommand is `proliferate services start` as a shell string.
func BuildServiceStartCommand(name, command, cwd string) string {
	return "proliferate services start --name " + ShellEscape(name) + " --command " + ShellEscape(command) + " --cwd " + ShellEscape(cwd)
}

// BuildServiceStartArgv is `proliferate services start` as argv.
func BuildServiceStartArgv(name, command, cwd string) []string {
	return []string{"proliferate", "services", "start", "--name", name, "--command", command, "--cwd", cwd}
}

// StaleProcessKillCommand frees the ports of a resumed sandbox before its processes
// are started again. Failures are ignored by design.
var StaleProcessKillCommand = "fuser -k " + strconv.Itoa(rules.PortOpenCode) + "/tcp " + strconv.Itoa(rules.PortSidecar) + "/tcp " +
	strconv.Itoa(rules.PortSandboxDaemon) + "/tcp 2>/dev/null || true; pkill -9 caddy || true; sleep 0.5"
