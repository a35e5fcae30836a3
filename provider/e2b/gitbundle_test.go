package e2b_test

import (
	"context"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
)

// A private repo boots tokenless on E2B too: the host fetches with the token and
// envd receives a bundle (docs/git-bundle.md).
func TestCreatePrivateRepoTokenless(t *testing.T) {
	t.Parallel()
	const token = "ghs_e2b_tokenless_41c9"
	git := gittest.New(t, token)
	url := git.CreateRepo(t, "priv", map[string]string{"README.md": "private\n"})
	f := newFixture(t)
	m, err := gitpush.New(gitpush.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f.opts.GitMirrors = m
	p := f.provider(t)
	opts := f.createOptions("tokenless")
	opts.Repos = []provider.RepoSpec{{RepoURL: url, Token: token, WorkspacePath: "priv"}}
	res, err := p.CreateSandbox(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Terminate(context.Background(), "tokenless", res.SandboxID) })
	sh := func(command string) string {
		t.Helper()
		out, err := p.ExecCommand(t.Context(), res.SandboxID, []string{"bash", "-c", command}, provider.ExecOptions{})
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("%s: %+v, %v", command, out, err)
		}
		return strings.TrimSpace(out.Stdout)
	}
	if got := sh(e2btest.MarkerCommand); got != e2btest.Marker {
		t.Errorf("%s = %q, want the test image's marker", e2btest.MarkerCommand, got)
	}
	if got := sh("cat /home/user/workspace/priv/README.md"); got != "private" {
		t.Errorf("README = %q", got)
	}
	if got := sh("git -C /home/user/workspace/priv remote get-url origin"); got != url {
		t.Errorf("origin = %q, want %q", got, url)
	}
	if env := sh("cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; true"); strings.Contains(env, token) {
		t.Error("a process environment in the sandbox holds the token")
	}
	if files := sh("grep -rlF " + token + " /home/user /tmp 2>/dev/null; true"); files != "" {
		t.Errorf("files in the sandbox hold the token: %s", files)
	}
}
