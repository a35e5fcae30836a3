package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestShellEscape(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"hello", "hello", `'hello'`},
		{"it's", "it's", `'it'\''s'`},
		{"empty", "", `''`},
		{"hello world $PATH", "hello world $PATH", `'hello world $PATH'`},
		{"a'b'c", "a'b'c", `'a'\''b'\''c'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ShellEscape(tt.in); got != tt.want {
				t.Errorf("ShellEscape(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzShellEscape checks the round trip through a real shell: quote, let bash parse
// it, get the same bytes back. One bash per fuzzing process parses every input (a bash
// per input made the target's 20000 inputs take minutes); after any failure it is
// replaced, so a broken quote cannot spoil the next input.
func FuzzShellEscape(f *testing.F) {
	for _, s := range []string{"", "hello", "it's", "a'b'c", "$HOME `x` \"q\" \\", "\n\t*?[]"} {
		f.Add(s)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		f.Skip("no bash")
	}
	var sh *bashPrinter
	f.Cleanup(func() { sh.close() })
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsRune(s, 0) {
			t.Skip("argv cannot carry NUL")
		}
		if sh == nil {
			sh = startBashPrinter(t)
		}
		out, err := sh.print(ShellEscape(s))
		if err != nil {
			sh.close()
			sh = nil
			t.Fatalf("bash printf %s: %v", ShellEscape(s), err)
		}
		if out != s {
			sh.close()
			sh = nil
			t.Errorf("bash printf %s = %q, want %q", ShellEscape(s), out, s)
		}
	})
}

// bashPrinter is one bash reading commands from a pipe: print runs `printf %s WORD`
// in it and returns what it printed.
type bashPrinter struct {
	cmd     *exec.Cmd
	in, out *os.File
}

func startBashPrinter(t *testing.T) *bashPrinter {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "--norc", "--noprofile", "-s")
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	return &bashPrinter{cmd: cmd, in: inW, out: outR}
}

// print has bash run `printf %s word` and then print a NUL (which no input holds),
// and reads up to that NUL, for at most 10 s.
func (b *bashPrinter) print(word string) (string, error) {
	if _, err := b.in.WriteString("printf %s " + word + "\nprintf '\\0'\n"); err != nil {
		return "", err
	}
	if err := b.out.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return "", err
	}
	var got []byte
	buf := make([]byte, 4096)
	for {
		n, err := b.out.Read(buf)
		got = append(got, buf[:n]...)
		if i := bytes.IndexByte(got, 0); i >= 0 {
			if i != len(got)-1 {
				return "", fmt.Errorf("output after the end marker: %q", got)
			}
			return string(got[:i]), nil
		}
		if err != nil {
			return "", fmt.Errorf("read bash's output (so far %q): %w", got, err)
		}
	}
}

func (b *bashPrinter) close() {
	if b == nil {
		return
	}
	b.in.Close()
	b.out.Close()
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
}

func TestCapOutput(t *testing.T) {
	long := strings.Repeat("x", 16484)
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"hello", "hello", 0, "hello"},
		{"empty", "", 0, ""},
		{"16484 x", long, 0, long[:16384] + TruncatedMarker},
		{"hello world max 5", "hello world", 5, "hello" + TruncatedMarker},
		{"exact boundary", strings.Repeat("x", 16384), 0, strings.Repeat("x", 16384)},
		// Decision: bytes, never splitting a character ("é" is 2 bytes).
		{"no split of a multi-byte character", "aé", 2, "a" + TruncatedMarker},
		{"3-byte character kept whole", "€€", 3, "€" + TruncatedMarker},
		{"4-byte character dropped whole", "a😀", 4, "a" + TruncatedMarker},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CapOutput(tt.in, tt.max); got != tt.want {
				t.Errorf("CapOutput(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

func FuzzCapOutput(f *testing.F) {
	f.Add("hello world", 5)
	f.Add("aé€😀", 3)
	f.Fuzz(func(t *testing.T, s string, max int) {
		max = max%64 + 1
		if max <= 0 {
			max += 64
		}
		got := CapOutput(s, max)
		if utf8.ValidString(s) && !utf8.ValidString(got) {
			t.Errorf("CapOutput(%q, %d) = %q, not valid UTF-8", s, max, got)
		}
		body := strings.TrimSuffix(got, TruncatedMarker)
		if len(body) > max || !strings.HasPrefix(s, body) {
			t.Errorf("CapOutput(%q, %d) = %q, not a prefix of at most %d bytes", s, max, got, max)
		}
	})
}

func TestBuildE2BExecCommand(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		cwd     string
		timeout time.Duration
		want    string
	}{
		{"commit with quote in cwd", []string{"git", "commit", "-m", "it's done"}, "/home/user/workspace", 1500 * time.Millisecond,
			`cd '/home/user/workspace' && 'timeout' '2' 'git' 'commit' '-m' 'it'\''s done'`},
		{"default timeout no cwd", []string{"ls"}, "", 0, `'timeout' '30' 'ls'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BuildE2BExecCommand(tt.argv, tt.cwd, tt.timeout); got != tt.want {
				t.Errorf("BuildE2BExecCommand(%q, %q, %v) = %q, want %q", tt.argv, tt.cwd, tt.timeout, got, tt.want)
			}
		})
	}
}

func TestBuildModalExecArgv(t *testing.T) {
	tests := []struct {
		name    string
		argv    []string
		cwd     string
		env     []EnvPair
		timeout time.Duration
		want    []string
	}{
		{"cwd env git status", []string{"git", "status"}, "/w", []EnvPair{{"A", "1"}}, 10 * time.Second,
			[]string{"sh", "-c", `cd "$1" && shift && exec "$@"`, "--", "/w", "env", "A=1", "timeout", "10", "git", "status"}},
		{"bare", []string{"ls"}, "", nil, 1 * time.Millisecond, []string{"timeout", "1", "ls"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := BuildModalExecArgv(tt.argv, tt.cwd, tt.env, tt.timeout)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("BuildModalExecArgv mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestServiceSlug(t *testing.T) {
	long := strings.Repeat("a", 50)
	tests := []struct{ name, in, want string }{
		{"dev server (web)", "dev server (web)", "dev_server__web_"},
		{"50-char name", long, long[:40]},
		{"kept characters", "api_v2-x", "api_v2-x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ServiceSlug(tt.in); got != tt.want {
				t.Errorf("ServiceSlug(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestServiceTestCommand(t *testing.T) {
	p := DefaultPaths()
	log := p.ServiceTestLogFile("run1", 0, "dev server (web)")
	if want := "/tmp/auto-start-test-run1-0-dev_server__web_.log"; log != want {
		t.Errorf("ServiceTestLogFile = %q, want %q", log, want)
	}
	cwd := ServiceCwd(p, "frontend", "src")
	tests := []struct {
		name    string
		timeout time.Duration
		want    string
	}{
		{"e2b", 0, `cd '/home/user/workspace/frontend/src' && sh -c 'pnpm dev' > '` + log + `' 2>&1; EXIT_CODE=$?; cat '` + log + `'; exit $EXIT_CODE`},
		{"modal", 1500 * time.Millisecond, `cd '/home/user/workspace/frontend/src' && timeout 2 sh -c 'pnpm dev' > '` + log + `' 2>&1; EXIT_CODE=$?; cat '` + log + `'; exit $EXIT_CODE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := BuildServiceTestCommand(cwd, "pnpm dev", log, tt.timeout); got != tt.want {
				t.Errorf("BuildServiceTestCommand = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestServiceTestCommandRuns(t *testing.T) {
	dir := t.TempDir()
	log := dir + "/out.log"
	out, err := exec.Command("bash", "-c", BuildServiceTestCommand(dir, `echo "it's here"; exit 3`, log, 5*time.Second)).Output()
	var ee *exec.ExitError
	if err == nil || !asExit(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("exit = %v, want exit status 3", err)
	}
	if got, want := string(out), "it's here\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}
}

func TestServiceCwd(t *testing.T) {
	p := DefaultPaths()
	tests := []struct{ name, wp, cwd, want string }{
		{"empty workspacePath", "", "", "/home/user/workspace"},
		{"dot", ".", "", "/home/user/workspace"},
		{"repo", "frontend", "", "/home/user/workspace/frontend"},
		{"repo and cwd", "backend", "src", "/home/user/workspace/backend/src"},
		{"dot and cwd", ".", "styles", "/home/user/workspace/styles"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ServiceCwd(p, tt.wp, tt.cwd); got != tt.want {
				t.Errorf("ServiceCwd(%q, %q) = %q, want %q", tt.wp, tt.cwd, got, tt.want)
			}
		})
	}
}

// Quirk: the old code embedded the clone URL in raw single quotes, so a quote in a
// token broke the command. Everything is escaped here; a real shell proves it.
func TestCloneCommandQuotesToken(t *testing.T) {
	url := AuthenticatedCloneURL("https://github.com/org/repo.git", "to'ken")
	if want := "https://x-access-token:to'ken@github.com/org/repo.git"; url != want {
		t.Fatalf("AuthenticatedCloneURL = %q, want %q", url, want)
	}
	cmd := BuildCloneCommand(url, "ma'in", "/tmp/x y")
	out, err := exec.Command("bash", "-c", "set -- "+strings.TrimPrefix(cmd, "git ")+"; printf '%s\\n' \"$@\"").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "clone\n--depth\n1\n--branch\nma'in\n" + url + "\n/tmp/x y\n"
	if string(out) != want {
		t.Errorf("clone argv = %q, want %q", out, want)
	}
}

func TestSandboxTimeout(t *testing.T) {
	tests := []struct {
		name, in string
		want     time.Duration
	}{
		{"unset", "", time.Hour},
		{"number", "120", 120 * time.Second},
		{"exponent", "1e3", 1000 * time.Second},
		{"fraction", "1.5", 1500 * time.Millisecond},
		{"zero", "0", time.Hour},
		{"negative", "-5", time.Hour},
		{"garbage", "abc", time.Hour},
		{"infinity", "Infinity", time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SandboxTimeout(func(string) string { return tt.in })
			if got != tt.want {
				t.Errorf("SandboxTimeout(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// RunServiceTests runs each command through real bash in a rooted layout:
// the output lands in its log file and comes back capped with the exit code;
// a command the sandbox could not run reports exit 1 and the redacted error.
func TestRunServiceTests(t *testing.T) {
	paths := RootedPaths(t.TempDir())
	for _, d := range []string{paths.Tmp, paths.Workspace() + "/app/web"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmds := []ConfigurationServiceCommand{
		{Name: "ok", Command: "pwd; echo out; echo err >&2"},
		{Name: "fails", WorkspacePath: "app", Cwd: "web", Command: "exit 3"},
		{Name: "unrunnable", Command: "true"},
	}
	run := func(ctx context.Context, cwd, command, logFile string) (ExecResult, error) {
		if command == "true" {
			return ExecResult{}, errors.New("exec failed: token ghp_abcdefghijklmnopqrstuvwxyz0123456789")
		}
		out, err := exec.CommandContext(ctx, "bash", "-c", BuildServiceTestCommand(cwd, command, logFile, 0)).Output()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code, err = ee.ExitCode(), nil
		}
		return ExecResult{Stdout: string(out), ExitCode: code}, err
	}
	got := RunServiceTests(t.Context(), paths, cmds, "r1", run)
	if len(got) != 3 {
		t.Fatalf("got %d results, want 3", len(got))
	}
	if r := got[0]; r.ExitCode == nil || *r.ExitCode != 0 || r.Output != paths.Workspace()+"\nout\nerr\n" || r.LogFile != paths.ServiceTestLogFile("r1", 0, "ok") {
		t.Errorf("ok = %+v (output %q)", r, r.Output)
	}
	if b, err := os.ReadFile(got[0].LogFile); err != nil || string(b) != got[0].Output {
		t.Errorf("log file = %q, %v; want the output", b, err)
	}
	if r := got[1]; r.ExitCode == nil || *r.ExitCode != 3 || r.Cwd != paths.Workspace()+"/app/web" {
		t.Errorf("fails = %+v, want exit 3 in app/web", r)
	}
	if r := got[2]; r.ExitCode == nil || *r.ExitCode != 1 || strings.Contains(r.Output, "ghp_") || !strings.Contains(r.Output, "exec failed") {
		t.Errorf("unrunnable = %+v, want exit 1 and the redacted error", r)
	}
}
