package runplantest

import (
	"context"
	"errors"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bserver"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
)

const token = "runplan-token"

// plan has a step of every kind and every way a step can end: modes decided by
// the runner, remove of a directory, a fallback, a failure, a missing program, a
// dependency, a timeout, a service before and after the sidecar.
func plan() provider.Plan {
	const d = "/tmp/runplan"
	return provider.Plan{Env: map[string]string{"GREETING": "hello"},
		Blocking: []provider.Step{
			{Name: "private dir", Kind: provider.StepMkdir, Path: d + "/secret", Mode: 0o700},
			{Name: "public dir", Kind: provider.StepMkdir, Path: d + "/pub"},
			{Name: "secret file", Kind: provider.StepWrite, Path: d + "/secret/key", Mode: 0o600, Content: "k", Secret: true},
			{Name: "file", Kind: provider.StepWrite, Path: d + "/pub/a.txt", Content: "a\n"},
			{Name: "touch new", Kind: provider.StepTouch, Path: d + "/pub/t", Mode: 0o640},
			{Name: "touch existing", Kind: provider.StepTouch, Path: d + "/pub/a.txt"},
			{Name: "doomed file", Kind: provider.StepWrite, Path: d + "/gone/sub/f", Content: "x"},
			{Name: "remove", Kind: provider.StepRemove, Paths: []string{d + "/gone", d + "/pub/missing"}},
			{Name: "look", Kind: provider.StepRun, Env: map[string]string{"STEPVAR": "x"}, TimeoutMs: 10000,
				Command: "cd " + d + " && stat -c '%n %a' secret secret/key pub pub/a.txt pub/t && cat pub/a.txt secret/key && wc -c < pub/t && test ! -e gone && echo gone; echo $GREETING $STEPVAR"},
			{Name: "with fallback", Kind: provider.StepRun, Command: "echo first; exit 3", TimeoutMs: 10000,
				Fallback: &provider.Step{Name: "second", Kind: provider.StepRun, Command: "echo second", TimeoutMs: 10000}},
			{Name: "fails", Kind: provider.StepRun, Command: "echo broken >&2; exit 5", TimeoutMs: 10000},
			{Name: "missing program", Kind: provider.StepRun, Command: "no-such-program-42", Requires: "no-such-program-42"},
			{Name: "present path", Kind: provider.StepRun, Command: "true", Requires: d + "/pub/a.txt"},
			{Name: "after failure", Kind: provider.StepRun, Command: "true", IfAllOK: []string{"fails"}},
			{Name: "too slow", Kind: provider.StepRun, Command: "sleep 30", TimeoutMs: 1000},
		},
		Background: []provider.Step{
			{Name: "service too early", Kind: provider.StepService, TimeoutMs: 10000,
				Service: &provider.ServiceStart{Name: "early", Command: "sleep 300", Cwd: "/tmp"}},
			// The boot started sandbox-mcp already: this start only makes the runner wait
			// for its health.
			{Name: provider.StepNameSandboxMCP, Kind: provider.StepStart, Command: "true"},
			{Name: "service", Kind: provider.StepService, TimeoutMs: 10000,
				Service: &provider.ServiceStart{Name: "runplan", Command: "sleep 300", Cwd: "/tmp"}},
			{Name: "start sleeper", Kind: provider.StepStart, Command: "exec sleep 300"},
		},
	}
}

func TestSameReportsEverywhere(t *testing.T) {
	bin := testutil.Commands(t, "sandbox-mcp", "proliferate")
	eo := local.EngineOptions{SandboxMCP: filepath.Join(bin, "sandbox-mcp"), Proliferate: filepath.Join(bin, "proliferate")}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	targets := map[string]provider.Target{
		"local": localTarget(ctx, t, eo),
		"modal": modalTarget(ctx, t, eo),
		"e2b":   e2bTarget(ctx, t, eo),
	}
	targets["local-image"] = localImageTarget(ctx, t, eo)
	reports := map[string][]provider.StepReport{}
	for name, tg := range targets {
		rep, err := provider.RunPlan(ctx, plan(), tg, provider.RunOptions{})
		if err != nil {
			t.Fatalf("%s: RunPlan: %v\n%+v", name, err, rep)
		}
		reports[name] = rep
	}
	want := reports["local"]
	if len(want) != len(plan().Steps()) {
		t.Fatalf("local: %d reports, want one per step: %+v", len(want), want)
	}
	byName := map[string]provider.StepReport{}
	for _, r := range want {
		byName[r.Name] = r
	}
	for name, status := range map[string]string{"look": provider.StepOK, "with fallback": provider.StepOK, "fails": provider.StepFailed,
		"missing program": provider.StepSkipped, "present path": provider.StepOK, "after failure": provider.StepSkipped,
		"too slow": provider.StepFailed, "service too early": provider.StepSkipped, "service": provider.StepOK} {
		if byName[name].Status != status {
			t.Errorf("local: step %q = %+v, want %s", name, byName[name], status)
		}
	}
	if got, w := byName["look"].Output, "secret 700\nsecret/key 600\npub 755\npub/a.txt 644\npub/t 640\na\nk0\ngone\nhello x\n"; got != w {
		t.Errorf("local: look output = %q, want %q", got, w)
	}
	ignore := cmpopts.IgnoreFields(provider.StepReport{}, "DurationMs")
	for _, name := range slices.Sorted(maps.Keys(reports)) {
		if name == "local" {
			continue
		}
		if diff := cmp.Diff(want, reports[name], ignore); diff != "" {
			t.Errorf("%s reports differ from local (-local +%s):\n%s", name, name, diff)
		}
	}
}

// bootTarget boots a scratch sandbox with the one provider over eng and returns its
// Target: every backend is this provider, and only the engine differs.
func bootTarget(ctx context.Context, t *testing.T, name string, eng engine.Engine, o provider.Options, spec engine.Spec) provider.Target {
	t.Helper()
	p, err := provider.New(eng, o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.CreateSandbox(ctx, provider.CreateOptions{SessionID: "runplan-" + name, Repos: []provider.RepoSpec{},
		EnvVars: map[string]string{provider.EnvSandboxMCPAuthToken: token}, Spec: spec})
	if err != nil {
		t.Fatalf("%s: CreateSandbox: %v", name, err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "", res.SandboxID) })
	tg, err := p.Target(ctx, res.SandboxID, token)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// localTarget boots a sandbox on the local engine.
func localTarget(ctx context.Context, t *testing.T, eo local.EngineOptions) provider.Target {
	return bootTarget(ctx, t, "local", engineFor(t, eo), provider.Options{Kind: provider.KindLocal}, engine.Spec{})
}

// engineFor is an isolated local engine for a protocol server, ended with the test.
func engineFor(t *testing.T, eo local.EngineOptions) *local.Engine {
	eo.DataDir = t.TempDir()
	eng, err := local.NewEngine(eo)
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		infos, _ := eng.List(context.Background())
		for _, in := range infos {
			eng.Terminate(context.Background(), in.ID)
		}
		eng.Close()
	})
	return eng
}

func listen(t *testing.T) net.Listener {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// modalTarget boots a sandbox with the Modal provider over the local Modal server.
func modalTarget(ctx context.Context, t *testing.T, eo local.EngineOptions) provider.Target {
	srv, err := modalserver.New(modalserver.Options{Engine: engineFor(t, eo), Token: modalserver.Token{ID: "ak-local", Secret: "as-local"},
		SkipRunSteps: true}) // the base image's RUN steps: the host has its packages
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("modal server: %v", err)
		}
	})
	// Modal's SDK reads its server from the process environment.
	t.Setenv("MODAL_SERVER_URL", "http://"+l.Addr().String())
	t.Setenv("MODAL_CONFIG_PATH", filepath.Join(t.TempDir(), "none.toml"))
	t.Setenv("MODAL_PROFILE", "")
	t.Setenv("MODAL_ENVIRONMENT", "")
	env := map[string]string{"MODAL_TOKEN_ID": "ak-local", "MODAL_TOKEN_SECRET": "as-local", "MODAL_APP_NAME": "runplan"}
	eng := modal.NewEngine(modal.Options{Getenv: func(k string) string { return env[k] }, TLS: srv.TLSConfig()})
	t.Cleanup(func() { eng.Close() })
	hc := eng.PortClient()
	t.Cleanup(hc.CloseIdleConnections)
	return bootTarget(ctx, t, "modal", eng, provider.Options{Kind: provider.KindModal, HTTPClient: hc, ReadyWait: time.Second}, engine.Spec{})
}

// e2bTarget boots a sandbox with the E2B provider over the local E2B server.
func e2bTarget(ctx context.Context, t *testing.T, eo local.EngineOptions) provider.Target {
	const apiKey = "e2b_0123456789abcdef0123456789abcdef01234567"
	srv, err := e2bserver.New(e2bserver.Options{Engine: engineFor(t, eo), APIKey: apiKey})
	if err != nil {
		t.Fatal(err)
	}
	l := listen(t)
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, l) }()
	t.Cleanup(func() {
		stop()
		<-done
		srv.Close()
	})
	url := "http://" + l.Addr().String()
	c, err := e2b.NewClient(e2b.ClientOptions{APIKey: apiKey, APIURL: url, SandboxURL: url, Domain: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := e2b.NewEngine(c, e2b.EngineOptions{Template: "base", LocalTunnels: true})
	if err != nil {
		t.Fatal(err)
	}
	return bootTarget(ctx, t, "e2b", eng, provider.Options{Kind: provider.KindE2B}, engine.Spec{})
}
