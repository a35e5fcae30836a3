package local

// The acceptance checks of the local engine, through the Provider: real boots of
// sandbox-mcp from a real git repo.

import (
	"bytes"
	"context"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/provider"
)

func health(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url + "/api/health")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	c.CloseIdleConnections()
	return resp.StatusCode
}

func execOut(t *testing.T, p *testProvider, id string, argv ...string) string {
	t.Helper()
	res, err := p.ExecCommand(t.Context(), id, argv, provider.ExecOptions{})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return res.Stdout + res.Stderr
}

// Acceptance 1: two sandboxes from the same repo at once, each with its sidecar on
// :4000 inside behind its own tunnel, isolated from each other and from the host.
func TestAcceptanceTwoSandboxes(t *testing.T) {
	origin := gitRepo(t)
	p := newProvider(t, nil)
	opts := provider.CreateOptions{SessionID: "s", Repos: []provider.RepoSpec{{RepoURL: "file://" + origin, WorkspacePath: "app"}}}
	var boots [2]testBoot
	var errs [2]error
	var wg sync.WaitGroup
	for i := range boots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			boots[i], errs[i] = p.Boot(t.Context(), opts)
		}()
	}
	wg.Wait()
	for i := range boots {
		if errs[i] != nil {
			t.Fatalf("boot %d: %v", i, errs[i])
		}
		t.Cleanup(func() { p.Terminate(context.Background(), "s", boots[i].SandboxID) })
	}
	a, b := boots[0], boots[1]
	if a.SandboxMCPURL == b.SandboxMCPURL {
		t.Fatalf("both sandboxes have the sidecar URL %s", a.SandboxMCPURL)
	}
	for _, bt := range boots {
		if code := health(t, bt.SandboxMCPURL); code != http.StatusOK {
			t.Errorf("%s: /api/health through its tunnel = %d", bt.SandboxID, code)
		}
		// The sidecar listens on the production port inside.
		if out := execOut(t, p, bt.SandboxID, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/4000 && echo open"); out != "open\n" {
			t.Errorf("%s: port 4000 inside: %q", bt.SandboxID, out)
		}
		if _, err := os.Stat(filepath.Join(bt.Home, "workspace/app/README.md")); err != nil {
			t.Errorf("%s: clone: %v", bt.SandboxID, err)
		}
	}
	// ps inside shows only the sandbox's processes: none of the other's, none of the host's.
	ps := execOut(t, p, a.SandboxID, "ps", "-e", "-o", "pid=,comm=")
	for _, line := range strings.Split(strings.TrimSpace(ps), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		switch f[1] {
		case "exe", "sandbox-init", "sandbox-spawner", "sandbox-mcp", "caddy", "opencode", "ps", "bash":
		default:
			t.Errorf("ps in %s shows %q", a.SandboxID, line)
		}
	}
	if strings.Count(ps, "sandbox-mcp") != 1 {
		t.Errorf("ps in %s shows %d sandbox-mcp, want its own only:\n%s", a.SandboxID, strings.Count(ps, "sandbox-mcp"), ps)
	}
	// /home/user/x inside is the sandbox's own.
	execOut(t, p, a.SandboxID, "bash", "-c", "echo inside > /home/user/x")
	if b, err := os.ReadFile("/home/user/x"); err == nil && string(b) == "inside\n" {
		t.Error("the sandbox's /home/user/x is on the host")
	}
	if out := execOut(t, p, b.SandboxID, "bash", "-c", "cat /home/user/x 2>&1 || true"); strings.Contains(out, "inside") {
		t.Error("the other sandbox sees /home/user/x")
	}
	// kill -9 -1 inside a: b and the host live on.
	host := exec.Command("sleep", "60")
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { host.Process.Kill(); host.Wait() }()
	res, err := p.ExecCommand(t.Context(), a.SandboxID, []string{"bash", "-c", "kill -9 -1"}, provider.ExecOptions{})
	if err != nil {
		t.Fatalf("kill -9 -1: %v (%+v)", err, res)
	}
	if code := health(t, b.SandboxMCPURL); code != http.StatusOK {
		t.Errorf("the other sandbox's sidecar after kill -9 -1 = %d", code)
	}
	if err := host.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a host process died of kill -9 -1 inside a sandbox: %v", err)
	}
	for deadline := time.Now().Add(5 * time.Second); health(t, a.SandboxMCPURL) == http.StatusOK; {
		if time.Now().After(deadline) {
			t.Error("the sandbox's own sidecar survived its kill -9 -1")
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out := execOut(t, p, a.SandboxID, "echo", "still here"); out != "still here\n" {
		t.Errorf("the sandbox after its kill -9 -1: %q", out)
	}
}

// Acceptance 2: a service started through the sidecar, then terminate: nothing of
// the sandbox is left in /proc, in the host's mounts or on its tunnel ports.
func TestAcceptanceTerminateLeavesNothing(t *testing.T) {
	p := newProvider(t, nil)
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	cl, err := sidecar.New(sidecar.Options{BaseURL: b.SandboxMCPURL, Token: b.SidecarToken})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.StartService(t.Context(), apitype.StartServiceRequest{Name: "svc", Command: "sleep 1000 & sleep 1000"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(execOut(t, p, b.SandboxID, "ps", "-e", "-o", "comm="), "sleep") {
		if time.Now().After(deadline) {
			t.Fatal("the service never ran")
		}
		time.Sleep(20 * time.Millisecond)
	}
	bx, err := p.eng.lookup(b.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	st := bx.st
	info, _ := p.eng.Get(t.Context(), b.SandboxID)
	if err := p.Terminate(t.Context(), "s", b.SandboxID); err != nil {
		t.Fatal(err)
	}
	if procLeft(st) {
		t.Error("processes of the sandbox remain in /proc")
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mi, []byte(b.SandboxID)) {
		t.Error("a mount of the sandbox remains on the host")
	}
	for _, tn := range info.Tunnels {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(tn.Host, strconv.Itoa(tn.HostPort)), time.Second); err == nil {
			c.Close()
			t.Errorf("tunnel of port %d still listens on %d", tn.Port, tn.HostPort)
		}
	}
	if err := p.Terminate(t.Context(), "s", b.SandboxID); err != nil {
		t.Errorf("terminate again = %v", err)
	}
	if _, err := p.eng.Get(t.Context(), b.SandboxID); err == nil {
		t.Error("the engine still knows the sandbox")
	}
}

// Acceptance 3: snapshot, then a sandbox from it has the file and runs the restore
// path of the plan (metadata read, no clone), on each root kind (an image sandbox's
// snapshot is an image on top of the provider's).
func TestAcceptanceSnapshotRestore(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testSnapshotRestore(t, k) })
	}
}

func testSnapshotRestore(t *testing.T, k rootKind) {
	origin := gitRepo(t)
	p := k.provider(t, nil)
	opts := provider.CreateOptions{SessionID: "s", Repos: []provider.RepoSpec{{RepoURL: "file://" + origin, WorkspacePath: "app"}}}
	first, err := p.Boot(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", first.SandboxID) })
	execOut(t, p, first.SandboxID, "bash", "-c", "echo before > /home/user/workspace/kept.txt")
	snap, err := p.Snapshot(t.Context(), "s", first.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	opts.SnapshotID = snap.SnapshotID
	b, err := p.Boot(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	if k.image {
		k.check(t, p.eng, b.SandboxID, snap.SnapshotID) // the snapshot is an image on the provider's
	}
	if out := execOut(t, p, b.SandboxID, "cat", "/home/user/workspace/kept.txt"); out != "before\n" {
		t.Errorf("file from before the snapshot = %q", out)
	}
	rep := report(b)
	// The repo dir comes from the restored metadata (without it, the workspace).
	if _, cloned := rep["clone app"]; cloned || !b.Plan.Restore || b.Plan.RepoDir != "/home/user/workspace/app" {
		t.Errorf("restore: cloned %v, restore %v, repoDir %q, want no clone and the metadata's repo dir", cloned, b.Plan.Restore, b.Plan.RepoDir)
	}
	if code := health(t, b.SandboxMCPURL); code != http.StatusOK {
		t.Errorf("restored sidecar health = %d", code)
	}
}

// Unisolated mode (explicit opt-in) boots the same plan as host processes: the
// layout is rooted in the sandbox's directory and the sidecar is on a free port.
func TestUnisolatedBoot(t *testing.T) {
	p, err := newTestProvider(testOptions{Root: t.TempDir(), SandboxMCP: sandboxMCP, Unisolated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.Engine().Capabilities().Isolated {
		t.Fatal("an unisolated provider's engine says it isolates")
	}
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	if b.Paths.Home != b.Home {
		t.Errorf("paths %+v, want rooted in %s", b.Paths, b.Home)
	}
	if code := health(t, b.SandboxMCPURL); code != http.StatusOK {
		t.Errorf("health = %d", code)
	}
	if rep := report(b); rep["start caddy"].Status != provider.StepSkipped || rep["start opencode"].Status != provider.StepSkipped {
		t.Errorf("fixed-port programs ran unisolated: %+v %+v", rep["start caddy"], rep["start opencode"])
	}
	if err := p.Terminate(t.Context(), "s", b.SandboxID); err != nil {
		t.Fatal(err)
	}
	if pids := markedPIDs(b.SandboxID); len(pids) > 0 {
		t.Errorf("processes %v left", pids)
	}
}
