package enginetest

import (
	"context"
	"errors"
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// testExec: exit codes, stdin, separate stdout and stderr, env (Spec.Env, then
// ExecRequest.Env, the later winning) and the working directory.
func (s *suite) testExec(t *testing.T) {
	in := s.create(t, engine.Spec{Env: []string{"SPEC_A=a", "SPEC_B=b"}})
	for _, want := range []int{0, 1, 7, 42} {
		code, _, _, err := s.run(t, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "exit " + strconv.Itoa(want)}})
		if err != nil || code != want {
			t.Errorf("exit %d: Exec = %d, %v", want, code, err)
		}
	}
	code, out, errOut, err := s.run(t, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "cat; echo to-stderr >&2"},
		Stdin: strings.NewReader("line one\nline two\n")})
	if err != nil || code != 0 || out != "line one\nline two\n" || errOut != "to-stderr\n" {
		t.Errorf("stdin and stderr: Exec = %d, %v, stdout %q, stderr %q", code, err, out, errOut)
	}
	code, out, _, err = s.run(t, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "echo $SPEC_A $SPEC_B $REQ_C"},
		Env: []string{"REQ_C=c", "SPEC_B=overridden"}})
	if err != nil || code != 0 || out != "a overridden c\n" {
		t.Errorf("env: Exec = %d, %v, %q, want %q", code, err, out, "a overridden c\n")
	}
	dir := home("exec-cwd")
	if err := s.e.MkdirAll(ctx(t), in.ID, dir); err != nil {
		t.Fatal(err)
	}
	code, out, _, err = s.run(t, in.ID, engine.ExecRequest{Argv: []string{"pwd"}, Cwd: dir})
	if err != nil || code != 0 || out != dir+"\n" {
		t.Errorf("cwd: Exec pwd = %d, %v, %q, want %q", code, err, out, dir)
	}
	// Argv is not a shell line: an argument with spaces and quotes arrives as it is.
	const arg = `it's "one" arg`
	code, out, _, err = s.run(t, in.ID, engine.ExecRequest{Argv: []string{"printf", "%s|", arg, "two"}})
	if err != nil || code != 0 || out != arg+"|two|" {
		t.Errorf("argv: Exec printf = %d, %v, %q", code, err, out)
	}
	// A large output arrives whole.
	code, out, _, err = s.run(t, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "head -c 1048576 /dev/zero | tr '\\0' x"}})
	if err != nil || code != 0 || len(out) != 1<<20 || strings.Trim(out, "x") != "" {
		t.Errorf("1 MiB output: Exec = %d, %v, %d bytes", code, err, len(out))
	}
}

// testExecTimeout: an exec past its timeout is killed and reported as ErrTimeout with
// exit code 124; a command within its timeout is not.
func (s *suite) testExecTimeout(t *testing.T) {
	in := s.create(t, engine.Spec{})
	start := time.Now()
	code, _, _, err := s.run(t, in.ID, engine.ExecRequest{Argv: []string{"sleep", "60"}, Timeout: time.Second})
	if !errors.Is(err, engine.ErrTimeout) || code != 124 {
		t.Errorf("Exec past its timeout = %d, %v, want 124, ErrTimeout", code, err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Exec with a 1s timeout returned after %v", d)
	}
	code, out, _, err := s.run(t, in.ID, engine.ExecRequest{Argv: []string{"echo", "quick"}, Timeout: 30 * time.Second})
	if err != nil || code != 0 || out != "quick\n" {
		t.Errorf("Exec within its timeout = %d, %v, %q", code, err, out)
	}
}

// testExecCancel: cancelling the context ends an exec and (Capabilities.ExecKill) kills
// its command.
func (s *suite) testExecCancel(t *testing.T) {
	in := s.create(t, engine.Spec{})
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	marker := home("cancelled-but-ran")
	go func() {
		_, err := s.e.Exec(c, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "sleep 2; echo late > " + marker}})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Exec whose context was cancelled returned no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Exec did not end within 30s of its context's cancellation")
	}
	// The sandbox is still usable.
	if out := s.sh(t, in.ID, "echo alive"); out != "alive\n" {
		t.Errorf("exec after a cancelled one = %q", out)
	}
	if !s.e.Capabilities().ExecKill {
		return
	}
	// Had the command gone on, it would have written the marker by now.
	time.Sleep(3 * time.Second)
	if _, err := s.e.Stat(ctx(t), in.ID, marker); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the command of a cancelled exec went on running: Stat(%s) = %v", marker, err)
	}
}

// testTTY: with TTY, the command runs on a terminal and reads its keyboard from Stdin.
func (s *suite) testTTY(t *testing.T) {
	in := s.create(t, engine.Spec{})
	if !s.e.Capabilities().TTY {
		_, _, _, err := s.run(t, in.ID, engine.ExecRequest{Argv: []string{"tty"}, TTY: true})
		unsupported(t, "Exec with TTY", err)
		return
	}
	code, out, _, err := s.run(t, in.ID, engine.ExecRequest{Argv: []string{"tty"}, TTY: true})
	if err != nil || code != 0 || !strings.HasPrefix(trim(out), "/dev/pts/") {
		t.Errorf("Exec tty on a TTY = %d, %v, %q, want /dev/pts/N", code, err, out)
	}
	code, out, _, err = s.run(t, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", "read l; echo got:$l; exit 3"}, TTY: true,
		Stdin: strings.NewReader("typed\n")})
	if err != nil || code != 3 || !strings.Contains(out, "got:typed") {
		t.Errorf("Exec on a TTY with input = %d, %v, %q, want 3 and got:typed", code, err, out)
	}
	// Without TTY, the command has no terminal.
	code, _, _, err = s.run(t, in.ID, engine.ExecRequest{Argv: []string{"tty"}})
	if err != nil || code == 0 {
		t.Errorf("Exec tty without TTY = %d, %v, want a non-zero exit", code, err)
	}
}
