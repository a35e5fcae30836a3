package modal

import (
	"context"
	"errors"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"net"
	"strings"
	"testing"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
	"github.com/proliferate-ai/sandbox-mcp/provider/providertest"
)

// localServer serves a modalserver on eng and points the SDK (which reads the process
// environment) at it. It returns the server and the provider's settings.
func localServer(t testing.TB, eng engine.Engine) (*modalserver.Server, map[string]string) {
	t.Helper()
	// The base image's RUN steps: the host has its packages. (These tests do not boot
	// the plan; the ones that do run on images: imageServer.)
	return serveOn(t, modalserver.Options{Engine: eng, SkipRunSteps: true})
}

// serveOn serves a modalserver with o (its Token the tests') and points the SDK at it.
func serveOn(t testing.TB, o modalserver.Options) (*modalserver.Server, map[string]string) {
	t.Helper()
	o.Token = modalserver.Token{ID: "ak-local", Secret: "as-local"}
	srv, err := modalserver.New(o)
	if err != nil {
		t.Fatal(err)
	}
	modaltest.PointSDK(t, modaltest.Serve(t, srv))
	return srv, map[string]string{"MODAL_TOKEN_ID": "ak-local", "MODAL_TOKEN_SECRET": "as-local", "MODAL_APP_NAME": "sandbox-test"}
}

// TestContract runs the provider contract suite without its lifecycle (that boots:
// TestContractLifecycle) through real gRPC against the local server.
func TestContract(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	_, env := localServer(t, eng)
	providertest.Run(t, func(t *testing.T) provider.SandboxProvider { return newProvider(t, env).Provider },
		providertest.Options{Kind: provider.KindModal})
}

// TestPreflight: a mis-shaped token pair fails before any call (the server URL points
// at a closed port, so a call would fail differently).
func TestPreflight(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	modaltest.PointSDK(t, "http://"+addr)
	for _, tc := range []struct {
		name       string
		env        map[string]string
		wantInHint string
	}{
		{"swapped", map[string]string{"MODAL_TOKEN_ID": "as-x", "MODAL_TOKEN_SECRET": "ak-y", "MODAL_APP_NAME": "a"}, "look swapped"},
		{"bad id", map[string]string{"MODAL_TOKEN_ID": "token", "MODAL_TOKEN_SECRET": "as-y", "MODAL_APP_NAME": "a"}, "MODAL_TOKEN_ID should look like 'ak-...'"},
		{"missing secret", map[string]string{"MODAL_TOKEN_ID": "ak-x", "MODAL_APP_NAME": "a"}, "Set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"},
		{"no app name", map[string]string{"MODAL_TOKEN_ID": "ak-x", "MODAL_TOKEN_SECRET": "as-y"}, "MODAL_APP_NAME is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t, tc.env)
			_, err := p.CreateSandbox(t.Context(), provider.CreateOptions{SessionID: "s1"})
			var pe *provider.ProviderError
			if !errors.As(err, &pe) || pe.Retryable || !strings.Contains(pe.Message, tc.wantInHint) {
				t.Fatalf("CreateSandbox = %v, want a non-retryable ProviderError containing %q", err, tc.wantInHint)
			}
			if strings.Count(pe.Message, "[modal:") != 1 {
				t.Errorf("message %q is not prefixed exactly once", pe.Message)
			}
			if strings.Contains(pe.Message, addr) || strings.Contains(pe.Message, "connection refused") {
				t.Errorf("the preflight made a call: %q", pe.Message)
			}
			if p.Health(t.Context()) {
				t.Errorf("Health = true with a bad configuration")
			}
		})
	}
}

// TestSDKOperations covers the operations that do not boot, on a sandbox made with the
// SDK directly: env file merge, snapshot + restore image, tunnels, exec, service test,
// CheckSandboxes and idempotent Terminate.
func TestSDKOperations(t *testing.T) {
	eng := modaltest.Engine(t, local.EngineOptions{})
	_, env := localServer(t, eng)
	p := newProvider(t, env)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, app, err := p.eng.connect(ctx, provider.OpCreateSandbox)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil),
		&modalsdk.SandboxCreateParams{Name: "session-1", EncryptedPorts: []int{provider.PortOpenCode, provider.PortPreview}, UnencryptedPorts: []int{provider.PortSSH}})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.SandboxID

	if err := p.WriteEnvFile(ctx, id, map[string]string{"A": "1", "B": "2"}); err != nil {
		t.Fatalf("WriteEnvFile: %v", err)
	}
	if err := p.WriteEnvFile(ctx, id, map[string]string{"B": "3"}); err != nil {
		t.Fatalf("WriteEnvFile: %v", err)
	}
	got, err := sb.Filesystem.ReadText(ctx, provider.DefaultPaths().EnvOverrideFile(), nil)
	if err != nil || got != `{"A":"1","B":"3"}` {
		t.Errorf("env file = %q, %v", got, err)
	}

	// ReadFiles: nested files, a name with a newline and a trailing space, and a
	// subdirectory the sandbox user may not be able to read (then only it is skipped).
	if r, err := run(ctx, sb, []string{"sh", "-c", `set -e; d=/home/user/rf; mkdir -p $d/sub $d/locked
echo a > $d/a.txt; echo b > $d/sub/b.txt; printf n > "$d/new
line.txt "; echo x > $d/locked/x; chmod 000 $d/locked`}, nil); err != nil || r.ExitCode != 0 {
		t.Fatalf("make files for ReadFiles = %+v, %v", r, err)
	}
	files, err := p.ReadFiles(ctx, id, "/home/user/rf/")
	byPath := map[string]string{}
	for _, f := range files {
		byPath[f.Path] = string(f.Data)
	}
	if err != nil || byPath["a.txt"] != "a\n" || byPath["sub/b.txt"] != "b\n" || byPath["new\nline.txt "] != "n" {
		t.Errorf("ReadFiles = %q, %v, want a.txt, sub/b.txt and \"new\\nline.txt \"", byPath, err)
	}
	if files, err := p.ReadFiles(ctx, id, "/home/user/no-such-dir"); err != nil || len(files) != 0 {
		t.Errorf("ReadFiles of a missing folder = %v, %v, want none", files, err)
	}
	if r, err := run(ctx, sb, []string{"chmod", "755", "/home/user/rf/locked"}, nil); err != nil || r.ExitCode != 0 {
		t.Errorf("chmod back = %+v, %v", r, err)
	}

	if u, err := p.eng.PortURL(ctx, id, provider.PortOpenCode); err != nil || !strings.HasPrefix(u, "https://127.0.0.1:") {
		t.Errorf("PortURL(%d) = %q, %v, want the encrypted tunnel's https URL", provider.PortOpenCode, u, err)
	}
	if u, err := p.eng.PortURL(ctx, id, 9); err == nil {
		t.Errorf("PortURL of a port without a tunnel = %q, want an error", u)
	}

	r, err := p.ExecCommand(ctx, id, []string{"sh", "-c", "echo out; echo err >&2; exit 4"}, provider.ExecOptions{Env: []provider.EnvPair{{Key: "X", Value: "1"}}})
	if err != nil || r.Stdout != "out\n" || r.Stderr != "err\n" || r.ExitCode != 4 {
		t.Errorf("ExecCommand = %+v, %v", r, err)
	}
	r, err = p.ExecCommand(ctx, id, []string{"sleep", "5"}, provider.ExecOptions{TimeoutMs: 1000})
	if err != nil || r.ExitCode != 124 {
		t.Errorf("ExecCommand past its timeout = %+v, %v, want exit 124", r, err)
	}

	res, err := p.TestServiceCommands(ctx, id, []provider.ConfigurationServiceCommand{{Name: "ok (1)", Command: "echo served"}},
		provider.ServiceTestOptions{TimeoutMs: 5000, RunID: "r1"})
	// One result per command, named as §15.8 says, run in the workspace with its output
	// also in the log file.
	if err != nil || len(res) != 1 || res[0].ExitCode == nil || *res[0].ExitCode != 0 || !strings.Contains(res[0].Output, "served") ||
		res[0].LogFile != "/tmp/auto-start-test-r1-0-ok__1_.log" || res[0].Cwd != "/home/user/workspace" {
		t.Errorf("TestServiceCommands = %+v, %v", res, err)
	}
	if log, err := sb.Filesystem.ReadText(ctx, res[0].LogFile, nil); err != nil || !strings.Contains(log, "served") {
		t.Errorf("service test log = %q, %v", log, err)
	}

	snap, err := p.Snapshot(ctx, "session-1", id)
	if err != nil || !strings.HasPrefix(snap.SnapshotID, "im-") {
		t.Fatalf("Snapshot = %+v, %v", snap, err)
	}
	img, err := c.Images.FromID(ctx, snap.SnapshotID, nil)
	if err != nil {
		t.Fatalf("snapshot image: %v", err)
	}
	restored, err := c.Sandboxes.Create(ctx, app, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := restored.Filesystem.ReadText(ctx, provider.DefaultPaths().EnvOverrideFile(), nil); err != nil || got != `{"A":"1","B":"3"}` {
		t.Errorf("restored env file = %q, %v", got, err)
	}

	alive, err := p.CheckSandboxes(ctx, []string{"sb-unknown", restored.SandboxID, id})
	if err != nil || len(alive) != 2 || alive[0] != restored.SandboxID || alive[1] != id {
		t.Errorf("CheckSandboxes = %v, %v, want [%s %s]", alive, err, restored.SandboxID, id)
	}
	for range 2 {
		if err := p.Terminate(ctx, "session-1", id); err != nil {
			t.Errorf("Terminate: %v", err)
		}
	}
	if alive, _ := p.CheckSandboxes(ctx, []string{id}); len(alive) != 0 {
		t.Errorf("CheckSandboxes after Terminate = %v", alive)
	}
	if err := p.WriteEnvFile(ctx, id, map[string]string{"A": "1"}); !provider.IsProviderError(err) {
		t.Errorf("WriteEnvFile on a terminated sandbox = %v, want a ProviderError", err)
	}
	p.Terminate(ctx, "session-1", restored.SandboxID)
}

func TestBaseImage(t *testing.T) {
	env := map[string]string{"SANDBOX_MCP_BINARY_URL": "https://example.invalid/sandbox-mcp"}
	getenv := func(k string) string { return env[k] }
	img := DefaultBaseImage(getenv)
	def, err := img.Definition()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FROM debian:bookworm-slim\n", " git ", " caddy ", "useradd", "/home/user/workspace",
		"RUN curl -fsSL 'https://example.invalid/sandbox-mcp' -o /usr/local/bin/sandbox-mcp && chmod 755 /usr/local/bin/sandbox-mcp"} {
		if !strings.Contains(def, want) {
			t.Errorf("base image definition lacks %q:\n%s", want, def)
		}
	}
	if strings.Contains(def, "/usr/local/bin/proliferate") {
		t.Errorf("a binary without a URL is in the image:\n%s", def)
	}
	k1 := BaseSnapshotVersionKey(getenv, img)
	if k1 != BaseSnapshotVersionKey(getenv, img) || len(k1) != 64 {
		t.Errorf("version key %q is not a stable sha256", k1)
	}
	changed := img
	changed.Def.Steps = append([]image.Step{image.Apt("ripgrep")}, img.Def.Steps...)
	if BaseSnapshotVersionKey(getenv, changed) == k1 {
		t.Errorf("a change to the image does not change the version key")
	}
	env2 := map[string]string{"SANDBOX_MCP_BINARY_URL": "https://example.invalid/v2/sandbox-mcp"}
	if BaseSnapshotVersionKey(func(k string) string { return env2[k] }, DefaultBaseImage(func(k string) string { return env2[k] })) == k1 {
		t.Errorf("a new binary URL does not change the version key")
	}
	if BaseSnapshotVersionKey(func(k string) string {
		if k == "SANDBOX_IMAGE_VERSION" {
			return "v2"
		}
		return getenv(k)
	}, img) == k1 {
		t.Errorf("SANDBOX_IMAGE_VERSION does not change the version key")
	}
	withCopy := BaseImage{Def: image.Image{From: "debian:bookworm", Steps: []image.Step{image.Copy("a", "/a")}}}
	if _, err := withCopy.Definition(); err == nil {
		t.Errorf("Definition of an image with a copy step = nil error")
	}
}

func TestWholeSeconds(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{0, 0}, {-time.Second, 0}, {time.Millisecond, time.Second}, {time.Second, time.Second}, {1500 * time.Millisecond, 2 * time.Second},
	} {
		if got := wholeSeconds(tc.in); got != tc.want {
			t.Errorf("wholeSeconds(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
