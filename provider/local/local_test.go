package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/providertest"
)

// sandboxMCP is the sandbox-mcp binary built once for all tests.
var sandboxMCP string

func TestMain(m *testing.M) {
	MaybeRunInit()
	if testHelper() {
		return
	}
	dir, err := os.MkdirTemp("", "local-provider-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sandboxMCP = filepath.Join(dir, "sandbox-mcp")
	if err := testutil.BuildCommands(dir, "sandbox-mcp"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if leaked := killLeakedInits(); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "sandboxes left running by the tests: %v\n", leaked)
		code = 1
	}
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// killLeakedInits kills the sandbox inits this test process started that are still
// running, and says which (by their sandbox directory).
func killLeakedInits() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 || f[1] != strconv.Itoa(os.Getpid()) || f[0] == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if !bytes.HasPrefix(cmdline, []byte("sandbox-init")) {
			continue
		}
		mi, _ := os.ReadFile("/proc/" + e.Name() + "/mountinfo")
		where := e.Name()
		for _, l := range strings.Split(string(mi), "\n") {
			if i := strings.Index(l, "/sandboxes/"); i >= 0 {
				where = strings.Fields(l[i:])[0]
				break
			}
		}
		out = append(out, where)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return out
}

// gitRepo makes a repo with README.md on main and a branch "feature".
func gitRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	writeFile(t, filepath.Join(dir, "README.md"), "hello from main\n")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "first")
	git(t, dir, "checkout", "-q", "-b", "feature")
	writeFile(t, filepath.Join(dir, "FEATURE.md"), "feature\n")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "feature")
	git(t, dir, "checkout", "-q", "main")
	return dir
}

func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	// safe.directory: a sandbox's repos belong to its ids, not the host's root.
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@e", "-c", "commit.gpgsign=false", "-c", "safe.directory=*"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// hostPath is the host path of a path inside the sandbox b.
func hostPath(b testBoot, p string) string {
	if rest, ok := strings.CutPrefix(p, b.Paths.Home); ok && b.Paths.Home == provider.HomeDir {
		return b.Home + rest
	}
	if root, ok := strings.CutSuffix(b.Home, provider.HomeDir); ok && strings.HasPrefix(root, "/proc/") {
		return root + p // an image sandbox: its root, through its init's
	}
	if rest, ok := strings.CutPrefix(p, b.Paths.Tmp); ok && b.Paths.Tmp == provider.TmpDir {
		return filepath.Join(filepath.Dir(b.Home), "tmp") + rest
	}
	return p
}

// installed reports whether prog is on the host's PATH (the sandbox sees the host's
// root, so it has the same programs).
func installed(prog string) bool {
	_, err := exec.LookPath(prog)
	return err == nil
}

func statusIf(ok bool) string {
	if ok {
		return provider.StepOK
	}
	return provider.StepSkipped
}

func report(b testBoot) map[string]provider.StepReport {
	m := map[string]provider.StepReport{}
	for _, r := range b.Report {
		m[r.Name] = r
	}
	return m
}

// The boot plan on each root kind: clone, secret file, OpenCode config, sidecar
// healthy behind its tunnel and refusing calls without its token, Caddy where
// installed, a service; then terminate leaves nothing.
func TestBootClonesAndStartsSidecar(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testBootClones(t, k) })
	}
}

func testBootClones(t *testing.T, k rootKind) {
	origin := gitRepo(t)
	p := k.provider(t, nil)
	b, err := p.Boot(t.Context(), provider.CreateOptions{
		SessionID:        "sess-1",
		Repos:            []provider.RepoSpec{{RepoURL: "file://" + origin, WorkspacePath: "app", Branch: "feature"}},
		Branch:           "main",
		EnvVars:          map[string]string{"SANDBOX_MCP_AUTH_TOKEN": "secret-token", "FOO": "bar"},
		SecretFileWrites: []provider.SecretFileWrite{{FilePath: "./app/.env", Content: "K=v\n"}},
		SnapshotHasDeps:  true,
		ServiceCommands:  []provider.ConfigurationServiceCommand{{Name: "hello", Command: "echo hi from $FOO; sleep 60", WorkspacePath: "app"}},
	})
	if err != nil {
		t.Fatalf("Boot: %v\nreport: %+v", err, b.Report)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "sess-1", b.SandboxID) })

	repo := filepath.Join(b.Home, "workspace", "app")
	if got, err := os.ReadFile(filepath.Join(repo, "FEATURE.md")); err != nil || string(got) != "feature\n" {
		t.Errorf("FEATURE.md = %q, %v, want the feature branch checked out", got, err)
	}
	if fi, err := os.Stat(filepath.Join(repo, ".env")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("secret file = %v, %v, want mode 0600", fi, err)
	}
	if _, err := os.Stat(filepath.Join(b.Home, ".config/opencode/opencode.json")); err != nil {
		t.Errorf("global OpenCode config: %v", err)
	}

	if k.image {
		k.check(t, p.eng, b.SandboxID, p.o.Image)
		checkBoundBinary(t, p, b.SandboxID)
	}
	for path, want := range map[string]int{"/api/health": http.StatusOK, "/api/services": http.StatusUnauthorized} {
		resp, err := http.Get(b.SandboxMCPURL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without the token = %d, want %d", path, resp.StatusCode, want)
		}
	}

	rep := report(b)
	// The image has Caddy and no OpenCode; the default root has the host's programs.
	caddy, opencode := installed("caddy"), installed("opencode")
	if k.image {
		caddy, opencode = true, false
	}
	for name, want := range map[string]string{
		"clone app": provider.StepOK, "start sandbox-mcp": provider.StepOK, "start opencode": statusIf(opencode),
		"start caddy": statusIf(caddy), "copy tool dependencies": provider.StepSkipped, "secret file app/.env": provider.StepOK,
	} {
		if got := rep[name].Status; got != want {
			t.Errorf("step %q status = %q (%s), want %q", name, got, rep[name].Reason, want)
		}
	}
	alive, _ := p.CheckSandboxes(t.Context(), []string{b.SandboxID})
	if len(alive) != 1 {
		t.Errorf("CheckSandboxes = %q, want the sandbox", alive)
	}

	t.Run("service visible in /api/services", func(t *testing.T) {
		cl, err := sidecar.New(sidecar.Options{BaseURL: b.SandboxMCPURL, Token: b.SidecarToken})
		if err != nil {
			t.Fatal(err)
		}
		list, err := cl.ListServices(t.Context())
		if err != nil {
			t.Fatalf("GET /api/services: %v", err)
		}
		if rep["service hello"].Status != provider.StepOK {
			t.Errorf("service step = %+v", rep["service hello"])
		}
		found := false
		for _, s := range list.Services {
			if s.Name == "hello" && s.Cwd == b.Paths.RepoDir("app") {
				found = true
			}
		}
		if !found {
			t.Errorf("services = %+v, want hello in %s", list.Services, repo)
		}
	})

	bx, err := p.eng.lookup(b.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), "sess-1", b.SandboxID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if procLeft(bx.st) {
		t.Errorf("processes left after Terminate")
	}
	if _, err := os.Stat(b.Home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sandbox directory still there: %v", err)
	}
	if err := p.Terminate(t.Context(), "sess-1", b.SandboxID); err != nil {
		t.Errorf("second Terminate = %v, want nil", err)
	}
	if resp, err := http.Get(b.SandboxMCPURL + "/api/health"); err == nil {
		resp.Body.Close()
		t.Errorf("sidecar still answers after Terminate")
	}
}

func TestBootCloneFallbackAndFailure(t *testing.T) {
	origin := gitRepo(t)
	p := newProvider(t, nil)
	tests := []struct {
		name    string
		repo    provider.RepoSpec
		wantErr string
		want    string // file that must exist in the clone
	}{
		{"missing branch falls back to default", provider.RepoSpec{RepoURL: origin, WorkspacePath: ".", Branch: "no-such-branch"}, "", "README.md"},
		// sandboxctl create --repo URL#branch: a branch asked for by name must exist.
		{"missing required branch fails naming it", provider.RepoSpec{RepoURL: origin, WorkspacePath: ".", Branch: "no-such-branch",
			BranchRequired: true}, "no-such-branch", ""},
		{"missing repo fails the boot", provider.RepoSpec{RepoURL: filepath.Join(origin, "nope"), WorkspacePath: "."}, "clone .", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s", Repos: []provider.RepoSpec{tt.repo}})
			t.Cleanup(func() {
				if b.SandboxID != "" {
					p.Terminate(context.Background(), "s", b.SandboxID)
				}
			})
			if tt.wantErr != "" {
				if err == nil || !provider.IsProviderError(err) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Boot err = %v, want a provider error containing %q", err, tt.wantErr)
				}
				if b.SandboxID != "" || len(b.Report) == 0 || b.Report[len(b.Report)-1].Status != provider.StepFailed {
					t.Errorf("failed Boot = id %q, report %+v, want no sandbox and the failed step last", b.SandboxID, b.Report)
				}
				entries, _ := os.ReadDir(filepath.Join(p.o.Root, "sandboxes"))
				if len(entries) != 0 {
					t.Errorf("failed boot left %d sandboxes, want none", len(entries))
				}
				return
			}
			if err != nil {
				t.Fatalf("Boot: %v", err)
			}
			if _, err := os.Stat(filepath.Join(b.Home, "workspace", tt.want)); err != nil {
				t.Errorf("clone lacks %s: %v", tt.want, err)
			}
		})
	}
}

// A restore with SANDBOX_GIT_PULL_ON_RESTORE pulls what the origin gained since the
// snapshot, on each root kind (on the image, with the image's git).
func TestRestorePullsNewCommits(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testRestorePull(t, k) })
	}
}

func testRestorePull(t *testing.T, k rootKind) {
	origin := gitRepo(t)
	p := k.provider(t, map[string]string{"SANDBOX_GIT_PULL_ON_RESTORE": "true"})
	opts := provider.CreateOptions{SessionID: "s", Repos: []provider.RepoSpec{{RepoURL: "file://" + origin, WorkspacePath: "."}}, Branch: "main"}
	first, err := p.Boot(t.Context(), opts)
	if err != nil {
		t.Fatalf("Boot: %v", err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", first.SandboxID) })
	snap, err := p.Snapshot(t.Context(), "s", first.SandboxID)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if err := p.Terminate(t.Context(), "s", first.SandboxID); err != nil {
		t.Fatal(err)
	}

	writeFile(t, filepath.Join(origin, "NEW.md"), "new\n")
	git(t, origin, "add", ".")
	git(t, origin, "commit", "-q", "-m", "new")

	opts.SnapshotID = snap.SnapshotID
	b, err := p.Boot(t.Context(), opts)
	if err != nil {
		t.Fatalf("Boot from snapshot: %v", err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	rep := report(b)
	if !b.Plan.Pull || rep["pull ."].Status != provider.StepOK || rep["record git fetch"].Status != provider.StepOK {
		t.Fatalf("pull = %v, steps %+v %+v", b.Plan.Pull, rep["pull ."], rep["record git fetch"])
	}
	if _, ok := rep["clone ."]; ok {
		t.Errorf("restore cloned again")
	}
	if _, err := os.Stat(filepath.Join(b.Home, "workspace", "NEW.md")); err != nil {
		t.Errorf("pulled repo lacks NEW.md: %v", err)
	}
	var m provider.SessionMetadata
	raw, _ := os.ReadFile(provider.RootedPaths(b.Home).MetadataFile())
	if err := json.Unmarshal(raw, &m); err != nil || m.RepoDir != b.Paths.Workspace() || m.LastGitFetchAt == nil {
		t.Errorf("metadata = %s, want repoDir in the new home and lastGitFetchAt", raw)
	}
}

func TestExecCommand(t *testing.T) {
	p := newProvider(t, nil)
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	tests := []struct {
		name     string
		argv     []string
		o        provider.ExecOptions
		wantOut  string
		wantCode int
	}{
		{"no shell interpolation", []string{"printf", "%s|%s", "it's", "$HOME"}, provider.ExecOptions{}, "it's|$HOME", 0},
		{"home and env", []string{"bash", "-c", `printf '%s %s' "$HOME" "$A"`}, provider.ExecOptions{Env: []provider.EnvPair{{Key: "A", Value: "1"}}}, b.Paths.Home + " 1", 0},
		{"cwd defaults to workspace", []string{"pwd"}, provider.ExecOptions{}, b.Paths.Workspace() + "\n", 0},
		{"exit code", []string{"bash", "-c", "exit 7"}, provider.ExecOptions{}, "", 7},
		{"timeout is 124", []string{"sleep", "10"}, provider.ExecOptions{TimeoutMs: 200}, "", 124},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := p.ExecCommand(t.Context(), b.SandboxID, tt.argv, tt.o)
			if err != nil {
				t.Fatalf("ExecCommand(%q): %v", tt.argv, err)
			}
			if res.Stdout != tt.wantOut || res.ExitCode != tt.wantCode {
				t.Errorf("ExecCommand(%q) = %q exit %d, want %q exit %d", tt.argv, res.Stdout, res.ExitCode, tt.wantOut, tt.wantCode)
			}
		})
	}
	if _, err := p.ExecCommand(t.Context(), "no-such", []string{"true"}, provider.ExecOptions{}); !provider.IsProviderError(err) {
		t.Errorf("ExecCommand(unknown) = %v, want a provider error", err)
	}
}

func TestWriteEnvFile(t *testing.T) {
	p := newProvider(t, nil)
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	for _, kv := range []map[string]string{{"A": "1", "B": "2"}, {"A": "3"}} {
		if err := p.WriteEnvFile(t.Context(), b.SandboxID, kv); err != nil {
			t.Fatal(err)
		}
	}
	raw, _ := os.ReadFile(hostPath(b, b.Paths.EnvOverrideFile()))
	if string(raw) != `{"A":"3","B":"2"}` {
		t.Errorf("env file = %s, want merged", raw)
	}
}

func TestHealth(t *testing.T) {
	if !newProvider(t, nil).Health(t.Context()) {
		t.Errorf("Health() = false on a working engine")
	}
}

// TestContract runs the provider contract suite on each root kind.
func TestContract(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) {
			o := testOptions{Root: t.TempDir(), SandboxMCP: sandboxMCP}
			if k.image {
				s, id := planImage(t)
				o.Images, o.Image = s, id
				t.Cleanup(func() { removeSnapshotImages(t, s, o.Root) })
			}
			providertest.Run(t, func(t *testing.T) provider.SandboxProvider {
				p := mustNew(t, o)
				t.Cleanup(func() { p.Close() })
				return p.Provider
			}, providertest.Options{
				Kind: provider.KindLocal,
				CreateOptions: func(t *testing.T) provider.CreateOptions {
					return provider.CreateOptions{SessionID: "contract", Repos: []provider.RepoSpec{{RepoURL: gitRepo(t), WorkspacePath: "."}},
						Spec: engine.Spec{Image: o.Image}}
				},
			})
		})
	}
}

// Sandboxes outlive the Provider that booted them: a new Provider on the same Root
// finds them alive, CheckSandboxes changes nothing, and Terminate ends them.
func TestSandboxOutlivesProvider(t *testing.T) {
	root := t.TempDir()
	p := mustNew(t, testOptions{Root: root, SandboxMCP: sandboxMCP})
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	q := mustNew(t, testOptions{Root: root, SandboxMCP: sandboxMCP})
	defer q.Close()
	defer q.Terminate(context.Background(), "s", b.SandboxID)
	before, _ := os.ReadFile(filepath.Join(root, "sandboxes", b.SandboxID, "state.json"))
	if got, err := q.CheckSandboxes(t.Context(), []string{b.SandboxID}); err != nil || len(got) != 1 {
		t.Errorf("CheckSandboxes after the booting Provider closed = %q, %v, want the sandbox", got, err)
	}
	after, _ := os.ReadFile(filepath.Join(root, "sandboxes", b.SandboxID, "state.json"))
	if string(before) != string(after) {
		t.Errorf("CheckSandboxes changed the sandbox's state")
	}
	resp, err := http.Get(b.SandboxMCPURL + "/api/health")
	if err != nil {
		t.Fatalf("the sidecar's tunnel is gone with the Provider: %v", err)
	}
	resp.Body.Close()
	if err := q.Terminate(t.Context(), "s", b.SandboxID); err != nil {
		t.Errorf("Terminate = %v", err)
	}
	if got, _ := q.CheckSandboxes(t.Context(), []string{b.SandboxID}); len(got) != 0 {
		t.Errorf("CheckSandboxes after Terminate = %q", got)
	}
}

// One Provider boots and terminates several sandboxes at once.
func TestParallelBoots(t *testing.T) {
	p := newProvider(t, nil)
	const n = 3
	var wg sync.WaitGroup
	errs := make(chan error, n)
	ids := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: fmt.Sprintf("s%d", i)})
			if err != nil {
				errs <- err
				return
			}
			ids <- b.SandboxID
		}()
	}
	wg.Wait()
	close(errs)
	close(ids)
	for err := range errs {
		t.Errorf("Boot: %v", err)
	}
	var all []string
	for id := range ids {
		all = append(all, id)
	}
	alive, _ := p.CheckSandboxes(t.Context(), all)
	if len(alive) != n {
		t.Errorf("CheckSandboxes = %d alive, want %d", len(alive), n)
	}
	for _, id := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Terminate(t.Context(), "s", id); err != nil {
				t.Errorf("Terminate(%s): %v", id, err)
			}
		}()
	}
	wg.Wait()
	if alive, _ := p.CheckSandboxes(t.Context(), all); len(alive) != 0 {
		t.Errorf("CheckSandboxes after Terminate = %q", alive)
	}
}
