package gitexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEnv(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		unset   []string
		keep    []string
	}{
		{"plain variables stay", []string{"PATH=/bin", "HOME=/h", "LANG=C"}, nil, []string{"PATH=/bin", "HOME=/h", "LANG=C"}},
		{"repository redirection dropped", []string{"GIT_DIR=/x", "GIT_WORK_TREE=/y", "GIT_OBJECT_DIRECTORY=/o",
			"GIT_ALTERNATE_OBJECT_DIRECTORIES=/a", "GIT_INDEX_FILE=/i", "GIT_COMMON_DIR=/c", "GIT_NAMESPACE=n"}, nil, nil},
		{"config injection dropped", []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=core.pager", "GIT_CONFIG_VALUE_0=evil",
			"GIT_CONFIG_PARAMETERS='core.fsmonitor'='evil'"}, nil, nil},
		{"prompts and traces dropped", []string{"GIT_ASKPASS=/evil", "SSH_ASKPASS=/evil", "GIT_TRACE_CURL=/tmp/t", "PAGER=less",
			"GIT_TERMINAL_PROMPT=1", "GIT_EXTERNAL_DIFF=/evil"}, nil, nil},
		{"config files and TLS kept", []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_SYSTEM=/s",
			"GIT_EXEC_PATH=/usr/lib/git-core", "GIT_SSL_CAINFO=/ca.pem"}, nil,
			[]string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_SYSTEM=/s", "GIT_EXEC_PATH=/usr/lib/git-core", "GIT_SSL_CAINFO=/ca.pem"}},
		{"caller's secrets dropped", []string{"GITPUSH_TOKEN=leak", "OTHER=1"}, []string{"GITPUSH_TOKEN"}, []string{"OTHER=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Env(tt.environ, tt.unset)
			want := append(append([]string{}, tt.keep...), fixedEnv...)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("Env(%q, %q) (-want +got):\n%s", tt.environ, tt.unset, d)
			}
		})
	}
}

func TestVerb(t *testing.T) {
	tests := map[string][]string{
		"status": {"status", "--porcelain"},
		"fetch":  {"-c", "transfer.fsckObjects=true", "fetch", "x"},
		"push":   {"--no-pager", "-C", "/d", "push"},
		"":       {"-c", "a=b"},
	}
	for want, args := range tests {
		if got := Verb(args); got != want {
			t.Errorf("Verb(%q) = %q, want %q", args, got, want)
		}
	}
}

// fakeGit writes an executable script named git and returns its path.
func fakeGit(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "git")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTimeoutKillsTheGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	git := fakeGit(t, "sleep 30 & echo $! > "+pidFile+"\nsleep 30\n")
	r, err := New(Options{Git: git, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(t.Context(), Cmd{Dir: dir, Args: []string{"status"}})
	var ge *Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ge) || ge.Limit != 200*time.Millisecond {
		t.Fatalf("Run of a hanging git = %v, want a deadline *Error with its limit", err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	proc := "/proc/" + strings.TrimSpace(string(b))
	for i := 0; i < 100; i++ {
		if st, err := os.ReadFile(proc + "/stat"); err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("git's child %s still runs after the timeout", proc)
}

func TestErrorKeepsStderrRedacted(t *testing.T) {
	git := fakeGit(t, "echo 'fatal: auth for s3cret failed' >&2\nexit 128\n")
	r, err := New(Options{Git: git})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Run(t.Context(), Cmd{Dir: t.TempDir(), Args: []string{"-c", "x=y", "fetch"}, Redact: []string{"s3cret"}})
	var ge *Error
	if !errors.As(err, &ge) || ge.ExitCode() != 128 || !Exited(err) {
		t.Fatalf("Run = %v, want an *Error with exit code 128", err)
	}
	if want := "git fetch in"; !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "s3cret") ||
		!strings.Contains(err.Error(), "auth for [REDACTED] failed") {
		t.Errorf("error = %q, want it to start with %q and carry the redacted stderr", err, want)
	}
}

func TestOutputCutsAndKills(t *testing.T) {
	git := fakeGit(t, "yes\n")
	r, err := New(Options{Git: git})
	if err != nil {
		t.Fatal(err)
	}
	out, cut, err := r.Output(t.Context(), Cmd{Dir: t.TempDir(), Args: []string{"log"}}, 10)
	if err != nil || !cut || string(out) != "y\ny\ny\ny\ny\n" {
		t.Errorf("Output of an endless git = %q, %v, %v; want 10 bytes, cut, nil", out, cut, err)
	}
}

func TestMaxProcsWaitsWithinContext(t *testing.T) {
	git := fakeGit(t, "sleep 1\n")
	r, err := New(Options{Git: git, MaxProcs: 1})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- r.Run(context.Background(), Cmd{Dir: t.TempDir(), Args: []string{"status"}}) }()
	time.Sleep(100 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := r.Run(ctx, Cmd{Dir: t.TempDir(), Args: []string{"status"}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second Run with the slot taken = %v, want the caller's deadline", err)
	}
	if err := <-done; err != nil {
		t.Errorf("first Run = %v", err)
	}
}

func TestEnvReachesGit(t *testing.T) {
	git := fakeGit(t, "echo \"$GIT_DIR|$GIT_TERMINAL_PROMPT|$EXTRA|$@\"\n")
	r, err := New(Options{Git: git, Environ: []string{"GIT_DIR=/evil", "PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := r.Output(t.Context(), Cmd{Dir: t.TempDir(), Args: []string{"status"}, Env: []string{"EXTRA=1", "GIT_TERMINAL_PROMPT=x"}}, 4096)
	want := "|x|1|" + strings.Join(BaseArgs, " ") + " status\n"
	if err != nil || string(out) != want {
		t.Errorf("git saw %q, %v; want %q", out, err, want)
	}
}
