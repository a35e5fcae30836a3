package e2b_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/providertest"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

var sandboxMCP string

func TestMain(m *testing.M) { e2btest.Main(m, &sandboxMCP) }

// env is the host environment of the providers under test.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// providerOptions are what the tests' providers are made of: the one provider
// (provider.New) over an engine of this package, as sandboxctl drives E2B.
type providerOptions struct {
	Client       e2b.ClientOptions
	Template     string
	LocalTunnels bool
	Getenv       func(string) string
	GitMirrors   provider.GitBundler
}

// newProvider is the provider of o.
func newProvider(o providerOptions) (*provider.Provider, error) {
	c, err := e2b.NewClient(o.Client)
	if err != nil {
		return nil, err
	}
	getenv := o.Getenv
	if getenv == nil {
		getenv = env(nil)
	}
	eng, err := e2b.NewEngine(c, e2b.EngineOptions{Template: o.Template, LocalTunnels: o.LocalTunnels, Timeout: provider.SandboxTimeout(getenv)})
	if err != nil {
		return nil, err
	}
	return provider.New(eng, provider.Options{Kind: provider.KindE2B, Getenv: getenv, GitMirrors: o.GitMirrors,
		Timeout: provider.SandboxTimeout(getenv)})
}

type fixture struct {
	srv  *e2btest.Server
	opts providerOptions
	repo string // clone URL inside the sandbox
}

// newFixture starts a local E2B server whose template base boots the test image
// (imagetest.PlanImage: git, Caddy and sshd, the sidecar binaries bound in by the engine),
// with a git repo in its shared directory.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP, Image: true})
	repo := filepath.Join(srv.Shared, "repo")
	gittest.Git(t, srv.Shared, "init", "-q", "-b", "main", "repo")
	gittest.Git(t, repo, "commit", "-q", "--allow-empty", "-m", "first")
	if err := os.WriteFile(filepath.Join(repo, "README.md"), []byte("hello from the repo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, repo, "add", "README.md")
	gittest.Git(t, repo, "commit", "-q", "-m", "readme")
	return &fixture{srv: srv, repo: "file://" + e2btest.SharedDir + "/repo", opts: providerOptions{
		Client:       srv.ClientOptions(),
		Template:     "base",
		LocalTunnels: true,
		Getenv:       env(map[string]string{"SANDBOX_TIMEOUT_SECONDS": "600"}),
	}}
}

func (f *fixture) provider(t testing.TB) *provider.Provider {
	t.Helper()
	p, err := newProvider(f.opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// marker is what e2btest.MarkerCommand prints in the sandbox, trimmed.
func (f *fixture) marker(t *testing.T, p *provider.Provider, id string) string {
	t.Helper()
	out, err := p.ExecCommand(t.Context(), id, []string{"sh", "-c", e2btest.MarkerCommand}, provider.ExecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(out.Stdout)
}

func (f *fixture) createOptions(session string) provider.CreateOptions {
	return provider.CreateOptions{SessionID: session, Branch: "main",
		Repos:   []provider.RepoSpec{{RepoURL: f.repo, WorkspacePath: "repo"}},
		EnvVars: map[string]string{provider.EnvSandboxMCPAuthToken: "sidecar-token-" + session}}
}

func TestContract(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.srv.CheckBootsImage(t)
	providertest.Run(t, func(t *testing.T) provider.SandboxProvider { return f.provider(t) }, providertest.Options{
		Kind:          provider.KindE2B,
		CreateOptions: func(t *testing.T) provider.CreateOptions { return f.createOptions("contract") },
	})
}

// TestMisconfigured: without a template a create fails before anything is made and
// says what is missing; a bad API URL fails at construction.
func TestMisconfigured(t *testing.T) {
	p, err := newProvider(providerOptions{Client: e2b.ClientOptions{APIKey: "e2b_00"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), "s", ""); err == nil || !strings.Contains(err.Error(), "sandboxId is required") {
		t.Errorf("Terminate without an id = %v", err)
	}
	_, err = p.CreateSandbox(t.Context(), provider.CreateOptions{SessionID: "s"})
	var pe *provider.ProviderError
	if !errorsAs(err, &pe) || pe.Retryable || !strings.Contains(pe.Error(), "E2B_TEMPLATE is required to create a sandbox") {
		t.Errorf("CreateSandbox without a template = %v", err)
	}
	if _, err := newProvider(providerOptions{Client: e2b.ClientOptions{APIKey: "k", APIURL: "ftp://x"}}); err == nil {
		t.Error("a provider with an ftp API URL = nil error")
	}
}

func sidecarHealthy(t *testing.T, url string) {
	t.Helper()
	cl, err := sidecar.New(sidecar.Options{BaseURL: url, HTTPClient: http.DefaultClient})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// The boot waits for the sidecar, not for Caddy: the preview route may take a
	// moment more (a reset connection until Caddy listens).
	for {
		_, err := cl.Health(ctx)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Errorf("sandbox-mcp health through the tunnel %s: %v", url, err)
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func TestCreateClonesAndStartsSidecar(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := f.provider(t)
	ctx := t.Context()
	res, err := p.CreateSandbox(ctx, f.createOptions("create"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Terminate(context.Background(), "create", res.SandboxID) })
	if res.SandboxMCPURL == "" || res.RestoreFallback != "" || res.ExpiresAt <= time.Now().UnixMilli() {
		t.Errorf("create = %+v, want a sidecar URL, no fallback and a future expiry", res)
	}
	sidecarHealthy(t, res.SandboxMCPURL)
	// Caddy is in the image: the sidecar answers through the preview tunnel too.
	sidecarHealthy(t, res.PreviewURL+"/_proliferate/mcp")
	if got := f.marker(t, p, res.SandboxID); got != e2btest.Marker {
		t.Errorf("%s = %q, want the test image's marker", e2btest.MarkerCommand, got)
	}

	files, err := p.ReadFiles(ctx, res.SandboxID, "/home/user/workspace/repo/")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(files, func(fc provider.FileContent) bool { return fc.Path == "README.md" })
	if i < 0 || string(files[i].Data) != "hello from the repo\n" {
		t.Errorf("ReadFiles of the clone = %d files, README %d, want the cloned README", len(files), i)
	}
	if !slices.ContainsFunc(files, func(fc provider.FileContent) bool { return strings.HasPrefix(fc.Path, ".git/") }) {
		t.Error("ReadFiles did not walk into subdirectories (.git)")
	}
	if got, err := p.ReadFiles(ctx, res.SandboxID, "/home/user/no-such-dir"); err != nil || len(got) != 0 {
		t.Errorf("ReadFiles of a missing folder = %v, %v, want none", got, err)
	}

	out, err := p.ExecCommand(ctx, res.SandboxID, []string{"git", "log", "--format=%s", "-n", "1"},
		provider.ExecOptions{Cwd: "/home/user/workspace/repo", Env: []provider.EnvPair{{Key: "A", Value: "it's"}}})
	if err != nil || out.ExitCode != 0 || out.Stdout != "readme\n" {
		t.Errorf("ExecCommand(git log) = %+v, %v, want readme", out, err)
	}
	out, err = p.ExecCommand(ctx, res.SandboxID, []string{"sh", "-c", `printf '%s' "$A"`}, provider.ExecOptions{Env: []provider.EnvPair{{Key: "A", Value: "it's $HOME"}}})
	if err != nil || out.Stdout != "it's $HOME" {
		t.Errorf("ExecCommand env = %+v, %v, want the value verbatim", out, err)
	}
	out, err = p.ExecCommand(ctx, res.SandboxID, []string{"sleep", "30"}, provider.ExecOptions{TimeoutMs: 500})
	if err != nil || out.ExitCode != 124 {
		t.Errorf("ExecCommand past its timeout = %+v, %v, want exit 124", out, err)
	}

	tests, err := p.TestServiceCommands(ctx, res.SandboxID, []provider.ConfigurationServiceCommand{
		{Name: "ok (web)", Command: "echo served; pwd", WorkspacePath: "repo"},
		{Name: "bad", Command: "echo broken >&2; exit 5"},
	}, provider.ServiceTestOptions{TimeoutMs: 10000, RunID: "r1"})
	if err != nil || len(tests) != 2 {
		t.Fatalf("TestServiceCommands = %+v, %v", tests, err)
	}
	if tests[0].ExitCode == nil || *tests[0].ExitCode != 0 || tests[0].Output != "served\n/home/user/workspace/repo\n" ||
		tests[0].LogFile != "/tmp/auto-start-test-r1-0-ok__web_.log" {
		t.Errorf("service test 0 = %+v", tests[0])
	}
	if tests[1].ExitCode == nil || *tests[1].ExitCode != 5 || tests[1].Output != "broken\n" {
		t.Errorf("service test 1 = %+v", tests[1])
	}

	if err := p.WriteEnvFile(ctx, res.SandboxID, map[string]string{"K1": "v1"}); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteEnvFile(ctx, res.SandboxID, map[string]string{"K2": "v2"}); err != nil {
		t.Fatal(err)
	}
	out, err = p.ExecCommand(ctx, res.SandboxID, []string{"cat", "/tmp/.proliferate_env.json"}, provider.ExecOptions{})
	if err != nil || out.Stdout != `{"K1":"v1","K2":"v2"}` {
		t.Errorf("env file = %q, %v, want both keys merged", out.Stdout, err)
	}
}

// TestPauseConnectResumes: pause returns the sandbox id; a create with it as snapshot
// and current sandbox resumes the same sandbox with its files, and the sidecar is
// healthy again.
func TestPauseConnectResumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := f.provider(t)
	ctx := t.Context()
	opts := f.createOptions("pause")
	res, err := p.CreateSandbox(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Terminate(context.Background(), "pause", res.SandboxID) })
	if _, err := p.ExecCommand(ctx, res.SandboxID, []string{"sh", "-c", "echo kept > /home/user/workspace/repo/state.txt"}, provider.ExecOptions{}); err != nil {
		t.Fatal(err)
	}
	snap, err := p.Pause(ctx, "pause", res.SandboxID)
	if err != nil || snap.SnapshotID != res.SandboxID {
		t.Fatalf("Pause = %+v, %v, want the sandbox id", snap, err)
	}
	if _, err := p.Pause(ctx, "pause", res.SandboxID); err != nil {
		t.Errorf("Pause of a paused sandbox = %v, want nil", err)
	}
	if got, _ := p.CheckSandboxes(ctx, []string{res.SandboxID}); len(got) != 0 {
		t.Errorf("CheckSandboxes lists the paused sandbox: %v", got)
	}
	// Ensure does not recover a paused sandbox through its side-effect-free check ...
	restore := opts
	restore.SnapshotID, restore.CurrentSandboxID = snap.SnapshotID, res.SandboxID
	got, err := p.EnsureSandbox(ctx, restore)
	if err != nil {
		t.Fatal(err)
	}
	// ... it restores it through connect, which resumes the same sandbox.
	if got.Recovered || got.SandboxID != res.SandboxID || got.RestoreFallback != "" {
		t.Fatalf("EnsureSandbox after pause = %+v, want sandbox %s resumed without fallback", got, res.SandboxID)
	}
	sidecarHealthy(t, got.SandboxMCPURL)
	out, err := p.ExecCommand(ctx, res.SandboxID, []string{"cat", "/home/user/workspace/repo/state.txt"}, provider.ExecOptions{})
	if err != nil || out.Stdout != "kept\n" {
		t.Errorf("file after pause and resume = %q, %v, want kept", out.Stdout, err)
	}
	if again, err := p.EnsureSandbox(ctx, restore); err != nil || !again.Recovered || again.SandboxID != res.SandboxID {
		t.Errorf("EnsureSandbox of the running sandbox = %+v, %v, want recovered", again, err)
	}
}

// TestRestoreFallbackIsReported: a snapshot that cannot be restored gives a fresh
// sandbox, and the result says so.
func TestRestoreFallbackIsReported(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := f.provider(t)
	opts := f.createOptions("fallback")
	opts.SnapshotID = "no-such-snapshot"
	res, err := p.CreateSandbox(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Terminate(context.Background(), "fallback", res.SandboxID) })
	if !strings.Contains(res.RestoreFallback, "no-such-snapshot") || res.SandboxID == "" {
		t.Errorf("CreateSandbox from a missing snapshot = %+v, want a fresh sandbox with the fallback reported", res)
	}
	sidecarHealthy(t, res.SandboxMCPURL)
}

// TestSnapshotRestore: a snapshot restores as a template, with the workspace kept.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := f.provider(t)
	ctx := t.Context()
	opts := f.createOptions("snap")
	res, err := p.CreateSandbox(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Terminate(context.Background(), "snap", res.SandboxID) })
	snap, err := p.Snapshot(ctx, "snap", res.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	restore := opts
	restore.SnapshotID = snap.SnapshotID
	child, err := p.CreateSandbox(ctx, restore)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Terminate(context.Background(), "snap", child.SandboxID) })
	if child.SandboxID == res.SandboxID || child.RestoreFallback != "" {
		t.Errorf("restore = %+v, want a new sandbox without fallback", child)
	}
	out, err := p.ExecCommand(ctx, child.SandboxID, []string{"cat", "/home/user/workspace/repo/README.md"}, provider.ExecOptions{})
	if err != nil || out.Stdout != "hello from the repo\n" {
		t.Errorf("README in the restored sandbox = %q, %v", out.Stdout, err)
	}
	if got := f.marker(t, p, child.SandboxID); got != e2btest.Marker {
		t.Errorf("the restored sandbox: %s = %q, want the test image's marker", e2btest.MarkerCommand, got)
	}
}

func TestErrorsAreRedactedProviderErrors(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	o := f.opts
	o.Template = "no-such-template"
	p, err := newProvider(o)
	if err != nil {
		t.Fatal(err)
	}
	opts := f.createOptions("err")
	opts.EnvVars["GITHUB_TOKEN"] = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
	_, err = p.CreateSandbox(t.Context(), opts)
	var pe *provider.ProviderError
	if !errorsAs(err, &pe) || pe.StatusCode != http.StatusNotFound || pe.Retryable {
		t.Fatalf("create from a missing template = %v, want a non-retryable 404 ProviderError", err)
	}
	bad := f.opts
	bad.Client.APIKey = "e2b_ffffffffffffffffffffffffffffffffffffffff"
	p, _ = newProvider(bad)
	if _, err := p.Snapshot(t.Context(), "s", "x"); !errorsAs(err, &pe) || pe.StatusCode != http.StatusUnauthorized || strings.Contains(pe.Error(), "ffffffff") {
		t.Errorf("call with a wrong key = %v, want a 401 ProviderError without the key", err)
	}
	if p.Health(t.Context()) {
		t.Error("Health with a wrong key = true")
	}
}
