package provider

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
)

// hostExecutor runs commands with bash and files directly on this machine,
// with gittest's isolated git environment: a sandbox without isolation.
type hostExecutor struct{}

func (hostExecutor) Run(ctx context.Context, command string, timeout time.Duration) (ExecResult, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Env = gittest.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ExecResult{Stdout: stdout.String(), Stderr: stderr.String(), ExitCode: ee.ExitCode()}, nil
	}
	return ExecResult{Stdout: stdout.String(), Stderr: stderr.String()}, err
}

func (hostExecutor) ReadFile(_ context.Context, p string) ([]byte, error) { return os.ReadFile(p) }

func (hostExecutor) WriteFile(_ context.Context, p string, data []byte, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, mode)
}

func TestExecGitBundleCloneAndPull(t *testing.T) {
	const token = "ghs_bundle_step_secret"
	srv := gittest.New(t, token)
	url := srv.CreateRepo(t, "app", map[string]string{"README.md": "hi\n"})
	gittest.Git(t, srv.Dir("app"), "branch", "develop", "main")
	m, err := gitpush.New(gitpush.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	p := Paths{Home: home, Tmp: filepath.Join(home, "tmp")}
	opts := CreateOptions{SessionID: "s", Repos: []RepoSpec{
		{RepoURL: url, Token: token, WorkspacePath: "app", Branch: "develop"},
		{RepoURL: url, Token: token, WorkspacePath: "other", Branch: "no-such-branch"},
	}}
	plan, err := BuildPlan(opts, PlanConfig{Kind: KindLocal, Now: planNow, Paths: p})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"clone app", "clone other"} {
		s, ok := findStep(plan, name)
		if !ok {
			t.Fatalf("plan lacks %q", name)
		}
		if _, err := ExecGitBundle(t.Context(), hostExecutor{}, m, s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	app := p.RepoDir("app")
	for dir, branch := range map[string]string{app: "develop", p.RepoDir("other"): "main"} {
		if got := strings.TrimSpace(gittest.Git(t, dir, "symbolic-ref", "--short", "HEAD")); got != branch {
			t.Errorf("%s on %q, want %q", dir, got, branch)
		}
		if got := strings.TrimSpace(gittest.Git(t, dir, "remote", "get-url", "origin")); got != url {
			t.Errorf("%s origin = %q, want %q", dir, got, url)
		}
	}
	if _, err := os.Stat(filepath.Join(p.Tmp, "git-boot-app.bundle")); !os.IsNotExist(err) {
		t.Errorf("bundle left behind: %v", err)
	}

	// Restore: the remote moved on; the pull step fast-forwards without a token.
	tip := srv.Commit(t, "app", "develop", "upstream", map[string]string{"new.txt": "new\n"})
	restore := opts
	restore.SnapshotID = "snap"
	plan, err = BuildPlan(restore, PlanConfig{Kind: KindLocal, Now: planNow, Paths: p,
		Settings: HostSettings{GitPullOnRestore: true}})
	if err != nil {
		t.Fatal(err)
	}
	pull, ok := findStep(plan, "pull app")
	if !ok {
		t.Fatal("restore plan lacks pull app")
	}
	msg, err := ExecGitBundle(t.Context(), hostExecutor{}, m, pull)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(gittest.Git(t, app, "rev-parse", "HEAD")); got != tip {
		t.Errorf("after pull HEAD = %s, want %s (%s)", got, tip, msg)
	}
	if msg, err := ExecGitBundle(t.Context(), hostExecutor{}, m, pull); err != nil || msg != "already up to date" {
		t.Errorf("second pull = %q, %v", msg, err)
	}
	// Nothing under the sandbox's home holds the token.
	err = filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(token)) {
			t.Errorf("%s holds the token", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without a mirror, or with a wrong token, the step fails and says so without the token.
	s, _ := findStep(plan, "pull app")
	if _, err := ExecGitBundle(t.Context(), hostExecutor{}, nil, s); err == nil {
		t.Error("ExecGitBundle without a bundler succeeded")
	}
	bad := *s.Git
	bad.Token, bad.Pull = "ghs_wrong_value", false
	s.Git = &bad
	if _, err := ExecGitBundle(t.Context(), hostExecutor{}, m, s); err == nil || strings.Contains(err.Error(), "ghs_wrong_value") {
		t.Errorf("wrong token: err = %v", err)
	}
}
