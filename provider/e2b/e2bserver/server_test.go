package e2bserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bserver"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

var sandboxMCP string

func TestMain(m *testing.M) { e2btest.Main(m, &sandboxMCP) }

func start(t testing.TB) (*e2btest.Server, *e2b.Client) {
	t.Helper()
	return startWith(t, e2btest.Options{})
}

// startWith is start with o (SandboxMCP is set here).
func startWith(t testing.TB, o e2btest.Options) (*e2btest.Server, *e2b.Client) {
	t.Helper()
	o.SandboxMCP = sandboxMCP
	srv := e2btest.Start(t, o)
	return srv, srv.Client(t)
}

func create(t testing.TB, c *e2b.Client, ns e2bwire.NewSandbox) e2bwire.Sandbox {
	t.Helper()
	if ns.TemplateID == "" {
		ns.TemplateID = "base"
	}
	if ns.Timeout == 0 {
		ns.Timeout = 300
	}
	sb, err := c.Create(context.Background(), ns)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.Kill(context.Background(), sb.SandboxID) })
	return sb
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	_, c := start(t)
	ctx := t.Context()
	sb := create(t, c, e2bwire.NewSandbox{Metadata: map[string]string{"owner": "test"}, EnvVars: map[string]string{"GREETING": "hi there"}})
	if sb.EnvdAccessToken == "" || sb.EnvdVersion == "" || sb.Domain != "localhost" {
		t.Errorf("create = %+v, want a token, an envd version and domain localhost", sb)
	}
	d, err := c.Get(ctx, sb.SandboxID)
	if err != nil || d.State != e2bwire.StateRunning || d.Metadata["owner"] != "test" || d.TemplateID != "base" {
		t.Fatalf("get = %+v, %v, want running with metadata", d, err)
	}
	if !d.EndAt.After(d.StartedAt) {
		t.Errorf("endAt %v not after startedAt %v", d.EndAt, d.StartedAt)
	}

	e := c.Envd(sb)
	r, err := e.Run(ctx, `echo "$GREETING"; echo err >&2; exit 3`, e2b.RunOptions{})
	if err != nil || r.ExitCode != 3 || r.Stdout != "hi there\n" || r.Stderr != "err\n" {
		t.Fatalf("run = %+v, %v, want exit 3 with stdout and stderr", r, err)
	}
	if err := e.WriteFile(ctx, "/home/user/state.txt", []byte("kept")); err != nil {
		t.Fatal(err)
	}

	if err := c.Pause(ctx, sb.SandboxID); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := c.Pause(ctx, sb.SandboxID); !e2b.IsConflict(err) {
		t.Errorf("second pause = %v, want 409", err)
	}
	if d, _ := c.Get(ctx, sb.SandboxID); d.State != e2bwire.StatePaused {
		t.Errorf("state after pause = %q, want paused", d.State)
	}
	if _, err := e.Run(ctx, "true", e2b.RunOptions{}); err == nil {
		t.Error("run in a paused sandbox succeeded, want an error")
	}
	again, err := c.Connect(ctx, sb.SandboxID, time.Minute)
	if err != nil || again.SandboxID != sb.SandboxID {
		t.Fatalf("connect = %+v, %v", again, err)
	}
	got, err := c.Envd(again).ReadFile(ctx, "/home/user/state.txt")
	if err != nil || string(got) != "kept" {
		t.Errorf("file after pause and connect = %q, %v, want kept", got, err)
	}

	running, err := c.List(ctx, e2b.ListOptions{States: []string{e2bwire.StateRunning}, Metadata: map[string]string{"owner": "test"}})
	if err != nil || len(running) != 1 || running[0].SandboxID != sb.SandboxID || running[0].EnvdAccessToken != "" {
		t.Errorf("list = %+v, %v, want the sandbox without its token", running, err)
	}
	if err := c.Kill(ctx, sb.SandboxID); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if err := c.Kill(ctx, sb.SandboxID); !e2b.IsNotFound(err) {
		t.Errorf("second kill = %v, want 404", err)
	}
	if _, err := c.Get(ctx, sb.SandboxID); !e2b.IsNotFound(err) {
		t.Errorf("get after kill = %v, want 404", err)
	}
	if _, err := c.Connect(ctx, sb.SandboxID, time.Minute); !e2b.IsNotFound(err) {
		t.Errorf("connect after kill = %v, want 404", err)
	}
}

func TestListPaginates(t *testing.T) {
	_, c := start(t)
	var ids []string
	for range 3 {
		ids = append(ids, create(t, c, e2bwire.NewSandbox{Metadata: map[string]string{"set": "p"}}).SandboxID)
	}
	got, err := c.List(t.Context(), e2b.ListOptions{Limit: 1, Metadata: map[string]string{"set": "p"}})
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs []string
	for _, s := range got {
		gotIDs = append(gotIDs, s.SandboxID)
	}
	slices.Sort(ids)
	slices.Sort(gotIDs)
	if !slices.Equal(ids, gotIDs) {
		t.Errorf("paginated list = %v, want %v", gotIDs, ids)
	}
}

func TestProcesses(t *testing.T) {
	t.Parallel()
	_, c := start(t)
	ctx := t.Context()
	e := c.Envd(create(t, c, e2bwire.NewSandbox{}))

	// Output streams while the process runs: the first line arrives before it ends.
	lines := make(chan string, 4)
	w := writerFunc(func(b []byte) { lines <- string(b) })
	p, err := e.Start(ctx, e2b.StartOptions{Cmd: "/bin/bash", Args: []string{"-c", "echo first; read x; echo got $x"}, Stdin: true, Stdout: w})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-lines:
		if l != "first\n" {
			t.Errorf("first chunk = %q, want first", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no output while the process waits for stdin")
	}
	procs, err := e.ListProcesses(ctx)
	if err != nil || !slices.ContainsFunc(procs, func(pi e2bwire.ProcessInfo) bool { return pi.PID == p.PID }) {
		t.Errorf("list processes = %+v, %v, want pid %d", procs, err, p.PID)
	}
	if err := e.SendInput(ctx, p.PID, []byte("abc\n")); err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.ExitCode != 0 || !res.Exited {
		t.Fatalf("wait = %+v, %v", res, err)
	}
	if l := <-lines; l != "got abc\n" {
		t.Errorf("second chunk = %q, want got abc", l)
	}

	// SIGKILL ends a process that would run for a minute.
	p, err = e.Start(ctx, e2b.StartOptions{Cmd: "sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SendSignal(ctx, p.PID, e2bwire.SignalSIGKILL); err != nil {
		t.Fatal(err)
	}
	res, err = p.Wait(ctx)
	if err != nil || res.Exited {
		t.Errorf("killed process = %+v, %v, want not exited normally", res, err)
	}
	if err := e.SendSignal(ctx, 999999, e2bwire.SignalSIGKILL); !e2b.IsNotFound(err) {
		t.Errorf("signal to an unknown pid = %v, want not_found", err)
	}

	// A timeout kills the command: exit 124.
	r, err := e.Run(ctx, "sleep 30", e2b.RunOptions{Timeout: 300 * time.Millisecond})
	if err != nil || !r.TimedOut || r.ExitCode != 124 {
		t.Errorf("run past its timeout = %+v, %v, want exit 124", r, err)
	}
	// A process outlives the stream that started it.
	p, err = e.Start(ctx, e2b.StartOptions{Cmd: "/bin/bash", Args: []string{"-c", "sleep 0.5; echo done > /tmp/bg"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Detach()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, err := e.ReadFile(ctx, "/tmp/bg")
		if err == nil && string(b) == "done\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("detached process did not finish: %q, %v", b, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(b []byte) (int, error) { f(append([]byte(nil), b...)); return len(b), nil }

func TestFilesystem(t *testing.T) {
	t.Parallel()
	_, c := start(t)
	ctx := t.Context()
	e := c.Envd(create(t, c, e2bwire.NewSandbox{}))

	if err := e.MakeDir(ctx, "/home/user/d/e"); err != nil {
		t.Fatal(err)
	}
	if err := e.MakeDir(ctx, "/home/user/d/e"); err != nil {
		t.Errorf("MakeDir of an existing directory = %v, want nil", err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if err := e.WriteFile(ctx, "d/big.bin", big); err != nil {
		t.Fatal(err)
	}
	got, err := e.ReadFile(ctx, "/home/user/d/big.bin")
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read back %d bytes, %v, want %d identical bytes", len(got), err, len(big))
	}
	st, err := e.Stat(ctx, "/home/user/d/big.bin")
	if err != nil || st.Type != e2bwire.FileTypeFile || st.Size != e2bwire.Int64(len(big)) || st.Name != "big.bin" {
		t.Errorf("stat = %+v, %v", st, err)
	}
	entries, err := e.ListDir(ctx, "/home/user/d")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name+":"+en.Type)
	}
	slices.Sort(names)
	if want := []string{"big.bin:FILE_TYPE_FILE", "e:FILE_TYPE_DIRECTORY"}; !slices.Equal(names, want) {
		t.Errorf("list = %v, want %v", names, want)
	}
	if err := e.Remove(ctx, "/home/user/d"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stat(ctx, "/home/user/d"); !e2b.IsNotFound(err) {
		t.Errorf("stat after remove = %v, want not_found", err)
	}
	if _, err := e.ReadFile(ctx, "/home/user/missing"); !e2b.IsNotFound(err) {
		t.Errorf("download of a missing file = %v, want 404", err)
	}
	if err := e.Remove(ctx, "/home/user/missing"); !e2b.IsNotFound(err) {
		t.Errorf("remove of a missing file = %v, want not_found", err)
	}
}

func TestAuth(t *testing.T) {
	srv, c := start(t)
	ctx := t.Context()
	sb := create(t, c, e2bwire.NewSandbox{})
	bad, _ := e2b.NewClient(e2b.ClientOptions{APIKey: "wrong", APIURL: srv.URL, SandboxURL: srv.URL})
	var ae *e2bwire.APIError
	if _, err := bad.Get(ctx, sb.SandboxID); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Errorf("get with a wrong key = %v, want 401", err)
	}
	forged := sb
	forged.EnvdAccessToken = "forged"
	if _, err := c.Envd(forged).Run(ctx, "true", e2b.RunOptions{}); err == nil || !strings.Contains(err.Error(), "unauthenticated") {
		t.Errorf("run with a forged token = %v, want unauthenticated", err)
	}
	if _, err := c.Envd(forged).ReadFile(ctx, "/etc/hostname"); !errors.As(err, &ae) || ae.Status != http.StatusUnauthorized {
		t.Errorf("download with a forged token = %v, want 401", err)
	}
}

// TestRoutesAuthenticated: every route but /health refuses a request without the API
// key or the access token.
func TestRoutesAuthenticated(t *testing.T) {
	srv, c := start(t)
	sb := create(t, c, e2bwire.NewSandbox{})
	// Every registered route, from the server itself, so a new one cannot slip in
	// unauthenticated.
	var paths []struct{ method, path string }
	for _, pat := range srv.Server.RoutePatterns() {
		method, p, _ := strings.Cut(pat, " ")
		p = strings.NewReplacer("{id}", sb.SandboxID, "{port}", "4000").Replace(p)
		paths = append(paths, struct{ method, path string }{method, p})
	}
	paths = append(paths, struct{ method, path string }{"GET", "/sandboxes/" + sb.SandboxID + "/metrics"}) // unserved
	if len(paths) < 15 {
		t.Fatalf("RoutePatterns() = %d routes, want every control-plane route", len(paths))
	}
	for _, p := range paths {
		req, _ := http.NewRequest(p.method, srv.URL+p.path, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s without a key = %d, want 401", p.method, p.path, resp.StatusCode)
		}
	}
	for _, p := range []string{e2bwire.PathProcessStart, e2bwire.PathProcessList, e2bwire.PathProcessUpdate,
		e2bwire.PathFilesystemStat, e2bwire.PathFilesystemMove, e2bwire.PathFilesystemWatch, "/files", "/envs"} {
		req, _ := http.NewRequest("POST", srv.URL+p, strings.NewReader("{}"))
		if p == "/envs" {
			req.Method = "GET"
		}
		req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("envd %s without a token = %d, want 401", p, resp.StatusCode)
		}
	}
}

func TestSnapshotAsTemplate(t *testing.T) {
	t.Parallel()
	_, c := start(t)
	ctx := t.Context()
	sb := create(t, c, e2bwire.NewSandbox{})
	if err := c.Envd(sb).WriteFile(ctx, "/home/user/x", []byte("from snapshot")); err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(ctx, sb.SandboxID, "snap")
	if err != nil || snap.SnapshotID == "" {
		t.Fatalf("snapshot = %+v, %v", snap, err)
	}
	list, err := c.ListSnapshots(ctx, sb.SandboxID)
	if err != nil || len(list) != 1 || list[0].SnapshotID != snap.SnapshotID {
		t.Errorf("list snapshots = %+v, %v", list, err)
	}
	child := create(t, c, e2bwire.NewSandbox{TemplateID: snap.SnapshotID})
	got, err := c.Envd(child).ReadFile(ctx, "/home/user/x")
	if err != nil || string(got) != "from snapshot" {
		t.Errorf("file in a sandbox from the snapshot = %q, %v", got, err)
	}
	if _, err := c.Create(ctx, e2bwire.NewSandbox{TemplateID: "no-such-template"}); !e2b.IsNotFound(err) {
		t.Errorf("create from an unknown template = %v, want 404", err)
	}
}

func TestTimeoutKills(t *testing.T) {
	t.Parallel()
	_, c := start(t)
	ctx := t.Context()
	sb := create(t, c, e2bwire.NewSandbox{Timeout: 1})
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Get(ctx, sb.SandboxID)
		if e2b.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox with a 1s timeout still there: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	auto := create(t, c, e2bwire.NewSandbox{Timeout: 1, AutoPause: true})
	deadline = time.Now().Add(30 * time.Second)
	for {
		d, err := c.Get(ctx, auto.SandboxID)
		if err == nil && d.State == e2bwire.StatePaused {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("autoPause sandbox not paused after its timeout: %+v, %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestConcurrentRuns(t *testing.T) {
	t.Parallel()
	_, c := start(t)
	e := c.Envd(create(t, c, e2bwire.NewSandbox{}))
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.Run(t.Context(), fmt.Sprintf("echo %d", i), e2b.RunOptions{})
			if err == nil && r.Stdout != fmt.Sprintf("%d\n", i) {
				err = fmt.Errorf("run %d = %+v", i, r)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSharedMount(t *testing.T) {
	t.Parallel()
	srv, c := start(t)
	if err := os.WriteFile(filepath.Join(srv.Shared, "hello"), []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := c.Envd(create(t, c, e2bwire.NewSandbox{})).Run(t.Context(), "cat "+e2btest.SharedDir+"/hello", e2b.RunOptions{})
	if err != nil || r.Stdout != "host" {
		t.Errorf("cat shared file = %+v, %v", r, err)
	}
}

// TestPauseBySnapshot: on an engine that cannot pause, pause snapshots and stops the
// sandbox, says so, and connect brings it back under the same id with its files.
func TestPauseBySnapshot(t *testing.T) {
	t.Parallel()
	srv, c := startWith(t, e2btest.Options{NoPause: true})
	ctx := t.Context()
	sb := create(t, c, e2bwire.NewSandbox{})
	if err := c.Envd(sb).WriteFile(ctx, "/home/user/f", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/sandboxes/"+sb.SandboxID+"/pause", nil)
	req.Header.Set("X-API-Key", e2btest.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("X-E2b-Local-Pause") != "snapshot" {
		t.Fatalf("pause = %d with X-E2b-Local-Pause %q, want 204 and snapshot", resp.StatusCode, resp.Header.Get("X-E2b-Local-Pause"))
	}
	if d, err := c.Get(ctx, sb.SandboxID); err != nil || d.State != e2bwire.StatePaused {
		t.Errorf("get after pause = %+v, %v, want paused", d, err)
	}
	if running, _ := c.List(ctx, e2b.ListOptions{States: []string{e2bwire.StateRunning}}); len(running) != 0 {
		t.Errorf("running after pause = %+v, want none", running)
	}
	again, err := c.Connect(ctx, sb.SandboxID, time.Minute)
	if err != nil || again.SandboxID != sb.SandboxID {
		t.Fatalf("connect = %+v, %v", again, err)
	}
	if got, err := c.Envd(again).ReadFile(ctx, "/home/user/f"); err != nil || string(got) != "kept" {
		t.Errorf("file after snapshot pause and connect = %q, %v", got, err)
	}
	if r, err := c.Envd(again).Run(ctx, "echo up", e2b.RunOptions{}); err != nil || r.Stdout != "up\n" {
		t.Errorf("run after connect = %+v, %v", r, err)
	}
}

// TestUnsecured: a sandbox created with secure false has no access token and its envd
// answers without one, as E2B's does.
func TestUnsecured(t *testing.T) {
	_, c := start(t)
	sb, err := c.Create(t.Context(), e2bwire.NewSandbox{TemplateID: "base", Timeout: 60})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill(context.Background(), sb.SandboxID)
	if sb.EnvdAccessToken == "" {
		t.Error("a create without secure has no token, want one (secured by default here)")
	}
	raw, err := http.Post(c.APIURL()+"/sandboxes", "application/json", strings.NewReader(`{"templateID":"base","secure":false}`))
	if err != nil {
		t.Fatal(err)
	}
	raw.Body.Close()
	if raw.StatusCode != http.StatusUnauthorized {
		t.Errorf("create without a key = %d, want 401", raw.StatusCode)
	}
	req, _ := http.NewRequest("POST", c.APIURL()+"/sandboxes", strings.NewReader(`{"templateID":"base","secure":false,"timeout":60}`))
	req.Header.Set("X-API-Key", e2btest.APIKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var open e2bwire.Sandbox
	err = json.NewDecoder(resp.Body).Decode(&open)
	resp.Body.Close()
	if err != nil || open.EnvdAccessToken != "" {
		t.Fatalf("create with secure false = %+v, %v, want no token", open, err)
	}
	defer c.Kill(context.Background(), open.SandboxID)
	if r, err := c.Envd(open).Run(t.Context(), "echo open", e2b.RunOptions{}); err != nil || r.Stdout != "open\n" {
		t.Errorf("run without a token = %+v, %v", r, err)
	}
}

// TestRestartKeepsSandboxes: a new server on the same engine serves the sandboxes the
// previous one created, with the same access tokens and metadata.
func TestRestartKeepsSandboxes(t *testing.T) {
	t.Parallel()
	srv, c := start(t)
	ctx := t.Context()
	sb := create(t, c, e2bwire.NewSandbox{Metadata: map[string]string{"m": "1"}})
	again, err := e2bserver.New(e2bserver.Options{Engine: srv.Engine, APIKey: e2btest.APIKey})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	hs := httptest.NewServer(again.Handler())
	defer hs.Close()
	c2, err := e2b.NewClient(e2b.ClientOptions{APIKey: e2btest.APIKey, APIURL: hs.URL, SandboxURL: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c2.Get(ctx, sb.SandboxID)
	if err != nil || d.Metadata["m"] != "1" || d.TemplateID != "base" || d.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("get on the new server = %+v, %v", d, err)
	}
	if r, err := c2.Envd(sb).Run(ctx, "echo still", e2b.RunOptions{}); err != nil || r.Stdout != "still\n" {
		t.Errorf("run through the new server = %+v, %v", r, err)
	}
}

// TestEgress: with Egress a sandbox reaches the outside through the engine's proxy
// (its env says where), unless it was created with allow_internet_access false.
func TestEgress(t *testing.T) {
	t.Parallel()
	_, c := startWith(t, e2btest.Options{Egress: true})
	off := false
	for _, tt := range []struct {
		allow *bool
		proxy bool
	}{{nil, true}, {&off, false}} {
		sb := create(t, c, e2bwire.NewSandbox{AllowInternetAccess: tt.allow})
		r, err := c.Envd(sb).Run(t.Context(), `printf %s "$HTTPS_PROXY"`, e2b.RunOptions{})
		if err != nil || (r.Stdout != "") != tt.proxy {
			t.Errorf("allow_internet_access %v: HTTPS_PROXY = %q, %v, want set %v", tt.allow, r.Stdout, err, tt.proxy)
		}
	}
}
