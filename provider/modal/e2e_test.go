package modal

// End to end through real gRPC: provider/modal → the local Modal-compatible server →
// the isolated local engine, booting real sandboxes (git clone, sandbox-mcp, caddy,
// proliferate services).

import (
	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"

	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
	"github.com/proliferate-ai/sandbox-mcp/provider/providertest"
)

// binaries builds sandbox-mcp and proliferate into a temp dir of t.
func binaries(t testing.TB) string {
	return testutil.Commands(t, "sandbox-mcp", "proliferate")
}

// isolatedEngine is the isolated local engine booting images from the shared test
// store, with sandbox-mcp and proliferate bound into every sandbox (the image lacks
// them, as the base image built without binary URLs does); skipped where namespaces
// are not permitted or the store cannot be built. It returns the engine and the id of
// the provider's base image built there (sandboxImage).
func isolatedEngine(t testing.TB) (*modaltest.ImageEngine, string) {
	t.Helper()
	bin := binaries(t)
	eng := modaltest.NewImageEngine(t, local.EngineOptions{SandboxMCP: filepath.Join(bin, "sandbox-mcp"), Proliferate: filepath.Join(bin, "proliferate")})
	return eng, sandboxImage(t, eng)
}

// sidecarHealthy polls the sidecar's health through the preview tunnel (Caddy routes
// /_proliferate/mcp/* to sandbox-mcp) until it answers 200.
func sidecarHealthy(ctx context.Context, c *http.Client, previewURL string) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", previewURL+"/_proliferate/mcp/api/health", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New(resp.Status)
			}
			return errors.Join(ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// e2eProvider is a provider on the local server over the image engine (the base image
// built there, Caddy and git from it); onImage fails t unless the sandbox runs on the
// base image's root, not the engine's default root.
func e2eProvider(t testing.TB) (p *testProvider, hc *http.Client, onImage func(t testing.TB, sandboxID string)) {
	eng, imageID := isolatedEngine(t)
	srv, env := imageServer(t, eng)
	hc = &http.Client{Transport: &http.Transport{TLSClientConfig: srv.TLSConfig()}, Timeout: 5 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	mirrors, err := gitpush.New(gitpush.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p = newTestProvider(t, Options{Getenv: func(k string) string { return env[k] }, TLS: srv.TLSConfig()}, mirrors)
	return p, hc, func(t testing.TB, sandboxID string) {
		t.Helper()
		checkImageRoot(t, eng, imageID, func(argv []string) (string, error) {
			r, err := p.ExecCommand(context.Background(), sandboxID, argv, provider.ExecOptions{})
			return r.Stdout + r.Stderr, err
		})
	}
}

// TestEndToEnd: create from the Go-defined base image with a real git repo cloned,
// sidecar healthy through the preview tunnel, a service command started, ensure
// recovers by name, snapshot → create from it, terminate twice.
func TestEndToEnd(t *testing.T) {
	p, hc, onImage := e2eProvider(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	// A private repo behind a token: the host fetches it and the sandbox gets a
	// bundle (tokenless git), as in production.
	remote := gittest.New(t, "git-token")
	origin := remote.CreateRepo(t, "origin", map[string]string{"README.md": "hello from the origin\n"})
	opts := provider.CreateOptions{SessionID: "e2e-session", Repos: []provider.RepoSpec{{RepoURL: origin, Token: "git-token", WorkspacePath: "app"}},
		EnvVars: map[string]string{provider.EnvSandboxMCPAuthToken: "e2e-token"}, SnapshotHasDeps: true,
		ServiceCommands: []provider.ConfigurationServiceCommand{{Name: "sleeper", Command: "sleep 600", WorkspacePath: "app"}}}

	first, err := p.EnsureSandbox(ctx, opts)
	if err != nil {
		t.Fatalf("EnsureSandbox: %v", err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), opts.SessionID, first.SandboxID) })
	// Every port Modal exposes at create is published, OpenCode's too although the
	// image has no OpenCode, and sshd's as a raw TCP tunnel.
	if first.Recovered || !strings.HasPrefix(first.SandboxID, "sb-") || !strings.HasPrefix(first.PreviewURL, "https://127.0.0.1:") ||
		!strings.HasPrefix(first.SandboxMCPURL, "https://127.0.0.1:") || !strings.HasPrefix(first.TunnelURL, "https://127.0.0.1:") ||
		first.SSHHost != "127.0.0.1" || first.SSHPort == 0 {
		t.Errorf("EnsureSandbox = %+v, want the sidecar's, OpenCode's, the preview's and the SSH tunnel", first)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(first.SSHHost, strconv.Itoa(first.SSHPort)), 10*time.Second); err != nil {
		t.Errorf("dial the SSH tunnel: %v", err)
	} else {
		c.Close()
	}
	onImage(t, first.SandboxID)
	hctx, hcancel := context.WithTimeout(ctx, 60*time.Second)
	if err := sidecarHealthy(hctx, hc, first.PreviewURL); err != nil {
		t.Errorf("sidecar not healthy through %s: %v", first.PreviewURL, err)
	}
	hcancel()
	r, err := p.ExecCommand(ctx, first.SandboxID, []string{"cat", "README.md"}, provider.ExecOptions{Cwd: "/home/user/workspace/app"})
	if err != nil || r.Stdout != "hello from the origin\n" {
		t.Errorf("cloned README = %+v, %v", r, err)
	}
	files, err := p.ReadFiles(ctx, first.SandboxID, "/home/user/workspace/app/")
	if err != nil || !slices.ContainsFunc(files, func(f provider.FileContent) bool { return f.Path == "README.md" }) {
		t.Errorf("ReadFiles = %d files, %v", len(files), err)
	}
	// The service starts in the background phase through `proliferate services start`.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r, err := p.ExecCommand(ctx, first.SandboxID, []string{"cat", "/tmp/proliferate/state.json"}, provider.ExecOptions{})
		if err == nil && strings.Contains(r.Stdout, `"sleeper"`) && strings.Contains(r.Stdout, "running") {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("service sleeper not running: %+v, %v", r, err)
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	res, err := p.TestServiceCommands(ctx, first.SandboxID, []provider.ConfigurationServiceCommand{{Name: "probe", Command: "cat README.md", WorkspacePath: "app"}},
		provider.ServiceTestOptions{TimeoutMs: 10000, RunID: "e2e"})
	if err != nil || len(res) != 1 || res[0].ExitCode == nil || *res[0].ExitCode != 0 || !strings.Contains(res[0].Output, "hello from the origin") {
		t.Errorf("TestServiceCommands = %+v, %v", res, err)
	}

	recovered := opts
	recovered.CurrentSandboxID = first.SandboxID
	again, err := p.EnsureSandbox(ctx, recovered)
	if err != nil || !again.Recovered || again.SandboxID != first.SandboxID || again.PreviewURL != first.PreviewURL ||
		again.TunnelURL != first.TunnelURL || again.SSHPort != first.SSHPort {
		t.Errorf("EnsureSandbox (recover) = %+v, %v", again, err)
	}

	snap, err := p.Snapshot(ctx, opts.SessionID, first.SandboxID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	restoreOpts := opts
	restoreOpts.SessionID, restoreOpts.SnapshotID = "e2e-restored", snap.SnapshotID
	restored, err := p.CreateSandbox(ctx, restoreOpts)
	if err != nil {
		t.Fatalf("CreateSandbox from snapshot: %v", err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), restoreOpts.SessionID, restored.SandboxID) })
	r, err = p.ExecCommand(ctx, restored.SandboxID, []string{"cat", "/home/user/workspace/app/README.md"}, provider.ExecOptions{})
	if err != nil || r.Stdout != "hello from the origin\n" {
		t.Errorf("restored README = %+v, %v", r, err)
	}
	for range 2 {
		if err := p.Terminate(ctx, "", first.SandboxID); err != nil {
			t.Errorf("Terminate(%s): %v", first.SandboxID, err)
		}
	}
	// With the first sandbox gone, the restored one answers through its own tunnel
	// (each sandbox has its own network: ports 4000 and 20000 are its own).
	hctx, hcancel = context.WithTimeout(ctx, 60*time.Second)
	if err := sidecarHealthy(hctx, hc, restored.PreviewURL); err != nil {
		t.Errorf("restored sidecar not healthy: %v", err)
	}
	hcancel()
	if err := p.Terminate(ctx, "", restored.SandboxID); err != nil {
		t.Errorf("Terminate(%s): %v", restored.SandboxID, err)
	}
	if alive, err := p.CheckSandboxes(ctx, []string{first.SandboxID, restored.SandboxID}); err != nil || len(alive) != 0 {
		t.Errorf("CheckSandboxes after Terminate = %v, %v", alive, err)
	}
}

// TestContractLifecycle runs the contract suite's lifecycle (ensure, recover by name,
// env file, snapshot, terminate twice, ensure after terminate) on booted sandboxes.
func TestContractLifecycle(t *testing.T) {
	eng, _ := isolatedEngine(t)
	srv, env := imageServer(t, eng)
	providertest.Run(t, func(t *testing.T) provider.SandboxProvider {
		mirrors, err := gitpush.New(gitpush.Options{CacheDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return newTestProvider(t, Options{Getenv: func(k string) string { return env[k] }, TLS: srv.TLSConfig()}, mirrors).Provider
	}, providertest.Options{Kind: provider.KindModal, Timeout: 4 * time.Minute,
		CreateOptions: func(t *testing.T) provider.CreateOptions {
			return provider.CreateOptions{SessionID: "contract", Repos: []provider.RepoSpec{}}
		}})
}

// BenchmarkCreateToHealthy: CreateSandbox (scratch session) until sandbox-mcp answers
// through the preview tunnel, then terminate; through real gRPC and the isolated engine.
func BenchmarkCreateToHealthy(b *testing.B) {
	p, hc, _ := e2eProvider(b)
	ctx := context.Background()
	opts := provider.CreateOptions{SessionID: "bench", Repos: []provider.RepoSpec{},
		EnvVars: map[string]string{provider.EnvSandboxMCPAuthToken: "t"}}
	for b.Loop() {
		res, err := p.CreateSandbox(ctx, opts)
		if err != nil {
			b.Fatal(err)
		}
		hctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = sidecarHealthy(hctx, hc, res.PreviewURL)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := p.Terminate(ctx, "", res.SandboxID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkExecRoundTripLocalEngine is one `true` through the SDK, the server and the
// isolated local engine (exec start, stdio to EOF, wait).
func BenchmarkExecRoundTripLocalEngine(b *testing.B) {
	p, _, _ := e2eProvider(b)
	e := p.Engine()
	ctx := context.Background()
	info, err := e.Create(ctx, engine.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Terminate(ctx, info.ID)
	for b.Loop() {
		if code, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"true"}}); err != nil || code != 0 {
			b.Fatalf("exec = %d, %v", code, err)
		}
	}
}
