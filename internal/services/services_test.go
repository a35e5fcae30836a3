package services

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

func init() {
	// The manager re-executes this test binary as the service monitor, and
	// TestReadopt as a sidecar it then kills.
	RunMonitorIfRequested()
	if os.Getenv("SERVICES_TEST_HELPER") == "sidecar" {
		os.Exit(helperSidecar())
	}
}

func TestMain(m *testing.M) {
	// Race-enabled monitors would otherwise linger a second at exit.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	goleak.VerifyTestMain(m)
}

// helperSidecar starts the services given in SERVICES_TEST_COMMANDS (name=command|…)
// then prints "ready" and waits to be killed.
func helperSidecar() int {
	m, err := New(Config{StateDir: os.Getenv("SERVICES_TEST_STATE"), WorkspaceDir: os.TempDir()})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	for _, nc := range strings.Split(os.Getenv("SERVICES_TEST_COMMANDS"), "|") {
		name, cmd, _ := strings.Cut(nc, "=")
		req := apitype.StartServiceRequest{Name: name, Command: cmd, Restart: os.Getenv("SERVICES_TEST_RESTART")}
		if req.Restart != "" {
			req.MaxRestarts = new(int)
			*req.MaxRestarts = 1
		}
		if _, err := m.Start(context.Background(), req); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	fmt.Println("ready")
	select {}
}

func newTestManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if cfg.WorkspaceDir == "" {
		cfg.WorkspaceDir = t.TempDir()
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 2 * time.Second
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { stopAll(t, m); m.Close() })
	return m
}

// stopAll stops every service so no test leaves a process behind.
func stopAll(t *testing.T, m *Manager) {
	list := m.List()
	for _, s := range list {
		if err := m.Stop(context.Background(), s.Name); err != nil {
			t.Errorf("cleanup: Stop(%q): %v", s.Name, err)
		}
	}
}

func start(t *testing.T, m *Manager, req apitype.StartServiceRequest) apitype.ServiceInfo {
	t.Helper()
	info, err := m.Start(t.Context(), req)
	if err != nil {
		t.Fatalf("Start(%q): %v", req.Name, err)
	}
	return info
}

// waitFor polls cond until it holds or the (generous) deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func get(t *testing.T, m *Manager, name string) apitype.ServiceInfo {
	t.Helper()
	info, err := m.Get(name)
	if err != nil {
		t.Fatalf("Get(%q): %v", name, err)
	}
	return info
}

func status(m *Manager, name string) string {
	info, _ := m.Get(name)
	return info.Status
}

// procsOf lists the live processes of the service's current run.
func procsOf(m *Manager, name string) []int {
	r, _ := m.record(name)
	pids, _ := findProcs(r.target())
	return pids
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"web", true},
		{"api-server_2.dev", true},
		{strings.Repeat("a", 64), true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{".", false},
		{"..", false},
		{"../x", false},
		{"a/b", false},
		{"a b", false},
		{"naïve", false},
		{"x\x00", false},
		{"...", true},
	}
	for _, tt := range tests {
		err := ValidateName(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateName(%q) = %v, want an error matching ErrInvalid", tt.name, err)
		}
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"web", "", ".", "..", "../x", "a/b", strings.Repeat("z", 65), "a\x00b", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateName(name) != nil {
			return
		}
		// A valid name is one path element inside the log folder.
		if filepath.Base(name) != name || name == "." || name == ".." || len(name) > MaxNameLen || strings.ContainsAny(name, "/\x00") {
			t.Fatalf("ValidateName(%q) = nil for a name that is not a safe file name", name)
		}
		dir := "/state/logs"
		if p := filepath.Join(dir, name+".log"); filepath.Dir(p) != dir {
			t.Fatalf("log path %q escapes %q", p, dir)
		}
	})
}

func TestStartListStop(t *testing.T) {
	m := newTestManager(t, Config{})
	cwd := t.TempDir()
	info := start(t, m, apitype.StartServiceRequest{Name: "web", Command: "echo hello-$SANDBOX_MCP_SERVICE $FORCE_COLOR; sleep 300", Cwd: cwd})
	if info.Status != apitype.StatusRunning || info.PID <= 0 || info.Cwd != cwd || !info.Ready {
		t.Fatalf("Start = %+v, want running with a pid, cwd %q, ready", info, cwd)
	}
	start(t, m, apitype.StartServiceRequest{Name: "db", Command: "sleep 300"})
	list := m.List()
	if len(list) != 2 || list[0].Name != "web" || list[1].Name != "db" {
		t.Fatalf("List = %+v; want web, db in start order", list)
	}
	logPath := filepath.Join(m.cfg.StateDir, "logs", "web.log")
	if info.LogFile != logPath {
		t.Errorf("LogFile = %q, want %q", info.LogFile, logPath)
	}
	waitFor(t, "log output", 5*time.Second, func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), "hello-web 1\n")
	})
	b, _ := os.ReadFile(logPath)
	wantPrefix := "\n=== Service \"web\" started at "
	if !strings.HasPrefix(string(b), wantPrefix) || !strings.Contains(string(b), " ===\nCommand: echo hello-$SANDBOX_MCP_SERVICE $FORCE_COLOR; sleep 300\nWorking directory: "+cwd+"\n\nhello-web 1\n") {
		t.Errorf("log = %q, want the contract's marker then the output", b)
	}
	pids := procsOf(m, "web")
	if len(pids) == 0 {
		t.Fatal("no process found for a running service")
	}
	if err := m.Stop(t.Context(), "web"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := get(t, m, "web"); got.Status != apitype.StatusStopped || got.Ready {
		t.Errorf("after Stop: %+v, want stopped, not ready", got)
	}
	for _, pid := range pids {
		if alive(pid, 0) || processExists(pid) {
			t.Errorf("process %d still alive after Stop", pid)
		}
	}
	if err := m.Stop(t.Context(), "nope"); !errors.Is(err, ErrNotFound) || err.Error() != `Service "nope" not found` {
		t.Errorf("Stop(nope) = %v, want ErrNotFound `Service \"nope\" not found`", err)
	}
	// A stopped service stops again without error.
	if err := m.Stop(t.Context(), "web"); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	// Restart by starting the same name again keeps its place in the list.
	start(t, m, apitype.StartServiceRequest{Name: "web", Command: "sleep 300"})
	list = m.List()
	if list[0].Name != "web" || list[0].Status != apitype.StatusRunning {
		t.Errorf("List after restart = %+v, want web first and running", list)
	}
	// The state file is the contract's JSON, two-space indented.
	raw, err := os.ReadFile(filepath.Join(m.cfg.StateDir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Services    map[string]apitype.ServiceInfo `json:"services"`
		ExposedPort *int                           `json:"exposedPort"`
	}
	if err := json.Unmarshal(raw, &st); err != nil || len(st.Services) != 2 || !strings.HasPrefix(string(raw), "{\n  \"services\": {") {
		t.Errorf("state.json = %s (%v), want both services, 2-space indent", raw, err)
	}
}

func processExists(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

func TestRestartByName(t *testing.T) {
	m := newTestManager(t, Config{})
	env := map[string]string{"GREETING": "hi"}
	first := start(t, m, apitype.StartServiceRequest{Name: "svc", Command: "echo $GREETING; sleep 300", Env: env, Restart: apitype.RestartOnFailure})
	again, err := m.Restart(t.Context(), "svc")
	if err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if again.PID == first.PID || again.Command != first.Command || again.Cwd != first.Cwd || again.Restart != apitype.RestartOnFailure || again.Env["GREETING"] != "hi" {
		t.Errorf("Restart = %+v, want a new pid with the same command, cwd and options as %+v", again, first)
	}
	if processExists(first.PID) {
		t.Errorf("old pid %d still alive after Restart", first.PID)
	}
	if _, err := m.Restart(t.Context(), "missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Restart(missing) = %v, want ErrNotFound", err)
	}
	if _, err := m.Get("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
}

func TestExitStatus(t *testing.T) {
	m := newTestManager(t, Config{})
	start(t, m, apitype.StartServiceRequest{Name: "ok", Command: "exit 0"})
	start(t, m, apitype.StartServiceRequest{Name: "bad", Command: "exit 3"})
	waitFor(t, "both exits", 10*time.Second, func() bool {
		return status(m, "ok") == apitype.StatusStopped && status(m, "bad") == apitype.StatusError
	})
	bad := get(t, m, "bad")
	if bad.ExitCode == nil || *bad.ExitCode != 3 || bad.LastExitAt == nil {
		t.Errorf("bad = %+v, want exitCode 3 and lastExitAt", bad)
	}
	ok := get(t, m, "ok")
	if ok.ExitCode == nil || *ok.ExitCode != 0 {
		t.Errorf("ok = %+v, want exitCode 0", ok)
	}
}

func TestStartValidation(t *testing.T) {
	m := newTestManager(t, Config{})
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		req  apitype.StartServiceRequest
		want string
	}{
		{apitype.StartServiceRequest{Command: "true"}, "name and command are required"},
		{apitype.StartServiceRequest{Name: "x"}, "name and command are required"},
		{apitype.StartServiceRequest{Name: "../x", Command: "true"}, `service name "../x" may contain only letters, digits, '.', '_' and '-'`},
		{apitype.StartServiceRequest{Name: "a/b", Command: "true"}, `service name "a/b" may contain only letters, digits, '.', '_' and '-'`},
		{apitype.StartServiceRequest{Name: strings.Repeat("n", 65), Command: "true"}, "service name is 65 characters long; the limit is 64"},
		{apitype.StartServiceRequest{Name: "x", Command: "true", Cwd: "/does/not/exist"}, `cwd "/does/not/exist" does not exist`},
		{apitype.StartServiceRequest{Name: "x", Command: "true", Cwd: file}, fmt.Sprintf("cwd %q is not a directory", file)},
		{apitype.StartServiceRequest{Name: "x", Command: "true", Restart: "sometimes"}, `restart must be "no", "on-failure" or "always"`},
		{apitype.StartServiceRequest{Name: "x", Command: "true", StopSignal: "SIGKILL"}, "stopSignal must be one of SIGTERM, SIGINT, SIGHUP, SIGQUIT"},
		{apitype.StartServiceRequest{Name: "x", Command: "true", Readiness: &apitype.Readiness{}}, "readiness must have exactly one of tcp, http or log"},
		{apitype.StartServiceRequest{Name: "x", Command: "true", Readiness: &apitype.Readiness{Log: "("}}, "readiness.log is not a valid regular expression: error parsing regexp: missing closing ): `(`"},
	}
	for _, tt := range tests {
		_, err := m.Start(t.Context(), tt.req)
		if !errors.Is(err, ErrInvalid) || err.Error() != tt.want {
			t.Errorf("Start(%+v) = %v, want ErrInvalid %q", tt.req, err, tt.want)
		}
	}
	if list := m.List(); len(list) != 0 {
		t.Errorf("List after invalid starts = %+v, want empty", list)
	}
}

func TestStopKillsWholeTree(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not installed")
	}
	m := newTestManager(t, Config{StopTimeout: time.Second})
	port := testutil.FreePort(t)
	start(t, m, apitype.StartServiceRequest{Name: "http", Command: fmt.Sprintf("python3 -m http.server %d --bind 127.0.0.1; echo done", port)})
	start(t, m, apitype.StartServiceRequest{Name: "setsid", Command: "setsid sleep 1000 & nohup sleep 1001 >/dev/null 2>&1 & (setsid bash -c 'exec env -u SANDBOX_MCP_SERVICE_INSTANCE sleep 1002' &) ; sleep 1000"})
	start(t, m, apitype.StartServiceRequest{Name: "stubborn", Command: "trap '' TERM; sleep 1000 & while true; do sleep 0.1; done"})
	start(t, m, apitype.StartServiceRequest{Name: "frozen", Command: "sleep 1000 & kill -STOP $!; sleep 1000"})
	waitFor(t, "http server to listen", 20*time.Second, func() bool { return checkTCP(port) == nil })
	waitFor(t, "setsid children", 10*time.Second, func() bool { return len(procsOf(m, "setsid")) >= 4 })

	waitFor(t, "the frozen child", 5*time.Second, func() bool { return len(procsOf(m, "frozen")) >= 2 })
	for _, name := range []string{"http", "setsid", "stubborn", "frozen"} {
		r, _ := m.record(name)
		pids, _ := findProcs(r.target())
		if err := m.Stop(t.Context(), name); err != nil {
			t.Fatalf("Stop(%q): %v", name, err)
		}
		for _, pid := range pids {
			if processExists(pid) {
				t.Errorf("Stop(%q): process %d still alive", name, pid)
			}
		}
		if left := procsOf(m, name); len(left) > 0 {
			t.Errorf("Stop(%q): processes %v left", name, left)
		}
	}
	if err := checkTCP(port); err == nil {
		t.Errorf("port %d still accepts connections after Stop", port)
	}
}

func TestConcurrentStarts(t *testing.T) {
	m := newTestManager(t, Config{})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.Start(context.Background(), apitype.StartServiceRequest{Name: fmt.Sprintf("s%02d", i), Command: "sleep 300"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("Start: %v", err)
		}
	}
	list := m.List()
	if len(list) != n {
		t.Fatalf("List has %d services, want %d", len(list), n)
	}
	raw, _ := os.ReadFile(filepath.Join(m.cfg.StateDir, "state.json"))
	var st stateFile
	if err := json.Unmarshal(raw, &st); err != nil || len(st.Services) != n {
		t.Fatalf("state.json: %d services, err %v; want %d", len(st.Services), err, n)
	}
	for name, r := range st.Services {
		if r.Status != apitype.StatusRunning || r.PID <= 0 {
			t.Errorf("state %s = %+v, want running with a pid", name, r.ServiceInfo)
		}
	}
}

// TestReadopt kills a sidecar with SIGKILL and checks that a new manager
// takes its services over: listed running, stoppable, their exits recorded.
func TestReadopt(t *testing.T) {
	stateDir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SERVICES_TEST_HELPER=sidecar", "SERVICES_TEST_STATE="+stateDir,
		"SERVICES_TEST_COMMANDS=long=sleep 1000|short=sleep 1; exit 7")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("helper sidecar said %q, want ready", line)
	}
	cmd.Process.Kill()
	cmd.Wait()

	m := newTestManager(t, Config{StateDir: stateDir, PollInterval: 20 * time.Millisecond})
	long := get(t, m, "long")
	if long.Status != apitype.StatusRunning || !processExists(long.PID) {
		t.Fatalf("long after re-adoption = %+v, want running with a live pid", long)
	}
	waitFor(t, "short's exit to be recorded", 10*time.Second, func() bool { return status(m, "short") == apitype.StatusError })
	if s := get(t, m, "short"); s.ExitCode == nil || *s.ExitCode != 7 {
		t.Errorf("short = %+v, want exitCode 7", s)
	}
	pids := procsOf(m, "long")
	if err := m.Stop(t.Context(), "long"); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if s := get(t, m, "long"); s.Status != apitype.StatusStopped {
		t.Errorf("long after Stop = %+v, want stopped", s)
	}
	for _, pid := range append(pids, long.PID) {
		if processExists(pid) {
			t.Errorf("process %d still alive after Stop", pid)
		}
	}
}

// TestRecycledPID checks that a state entry whose pid now belongs to another
// process is shown stopped and that process is never signalled.
func TestRecycledPID(t *testing.T) {
	stateDir := t.TempDir()
	other := exec.Command("sleep", "300")
	other.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	pid := other.Process.Pid
	st, err := procfs.ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	state := fmt.Sprintf(`{"services":{"old":{"name":"old","command":"sleep 300","cwd":"/","pid":%d,"status":"running","startedAt":1,"logFile":"x",
		"pgid":%d,"startTime":%d,"monitorPid":%d,"monitorStartTime":%d,"instance":"gone"}},"exposedPort":3000}`, pid, pid, st.Start+1, pid, st.Start+7)
	if err := os.WriteFile(filepath.Join(stateDir, "state.json"), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, Config{StateDir: stateDir})
	if s := get(t, m, "old"); s.Status != apitype.StatusStopped {
		t.Errorf("old = %+v, want stopped", s)
	}
	if err := m.Stop(t.Context(), "old"); err != nil {
		t.Errorf("Stop(old): %v", err)
	}
	if _, err := m.Restart(t.Context(), "old"); err != nil {
		t.Errorf("Restart(old): %v", err)
	}
	if !processExists(pid) {
		t.Fatalf("process %d with the recycled pid was signalled", pid)
	}
	if p, err := (statefile.ExposedPort{Dir: stateDir}).Load(); err != nil || p == nil || *p != 3000 {
		t.Errorf("exposed port after the manager's writes = %v, %v; want 3000 kept", p, err)
	}
}

func TestLogPath(t *testing.T) {
	m := newTestManager(t, Config{})
	if _, err := m.LogPath("../x"); !errors.Is(err, ErrInvalid) {
		t.Errorf("LogPath(../x) = %v, want ErrInvalid", err)
	}
	if _, err := m.LogPath("none"); !errors.Is(err, ErrNotFound) || err.Error() != `No logs found for service "none"` {
		t.Errorf("LogPath(none) = %v, want ErrNotFound", err)
	}
	start(t, m, apitype.StartServiceRequest{Name: "w", Command: "true"})
	p, err := m.LogPath("w")
	if err != nil || p != filepath.Join(m.cfg.StateDir, "logs", "w.log") {
		t.Errorf("LogPath(w) = %q, %v", p, err)
	}
}

// BenchmarkStartStop measures starting a service and stopping it again.
func BenchmarkStartStop(b *testing.B) {
	m, err := New(Config{StateDir: b.TempDir(), WorkspaceDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	for b.Loop() {
		if _, err := m.Start(ctx, apitype.StartServiceRequest{Name: "bench", Command: "sleep 600"}); err != nil {
			b.Fatal(err)
		}
		if err := m.Stop(ctx, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCorruptStateFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"services":{"a":`), 0o644)
	m := newTestManager(t, Config{StateDir: dir})
	if list := m.List(); len(list) != 0 {
		t.Errorf("List with a corrupt state file = %+v, want empty", list)
	}
	moved, _ := filepath.Glob(filepath.Join(dir, "state.json.corrupt-*"))
	if len(moved) != 1 {
		t.Errorf("corrupt state files moved aside: %v, want one", moved)
	}
	start(t, m, apitype.StartServiceRequest{Name: "after", Command: "sleep 300"})
	if fi, err := os.Stat(filepath.Join(dir, "state.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state.json: %v, %v; want mode 0600", fi, err)
	}
}

// TestLegacyStateEntry: an entry written by the old sidecar (no start time)
// is trusted only when the pid still runs `bash -c <command>`.
func TestLegacyStateEntry(t *testing.T) {
	dir := t.TempDir()
	legacy := exec.Command("bash", "-c", "sleep 300; true")
	legacy.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	other := exec.Command("sleep", "301")
	for _, c := range []*exec.Cmd{legacy, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	waitFor(t, "bash to run its command", 5*time.Second, func() bool { return legacyMatch(legacy.Process.Pid, "sleep 300; true") })
	state := fmt.Sprintf(`{"services":{"old":{"name":"old","command":"sleep 300; true","cwd":"/","pid":%d,"status":"running","startedAt":1,"logFile":"x"},
		"reused":{"name":"reused","command":"sleep 300; true","cwd":"/","pid":%d,"status":"running","startedAt":2,"logFile":"y"}},"exposedPort":null}`,
		legacy.Process.Pid, other.Process.Pid)
	os.WriteFile(filepath.Join(dir, "state.json"), []byte(state), 0o644)
	m := newTestManager(t, Config{StateDir: dir})
	if s := get(t, m, "old"); s.Status != apitype.StatusRunning {
		t.Errorf("legacy entry = %+v, want running", s)
	}
	if s := get(t, m, "reused"); s.Status != apitype.StatusStopped {
		t.Errorf("legacy entry with a reused pid = %+v, want stopped", s)
	}
	if err := m.Stop(t.Context(), "old"); err != nil {
		t.Fatal(err)
	}
	if processExists(legacy.Process.Pid) {
		t.Error("legacy service still alive after Stop")
	}
	if !processExists(other.Process.Pid) {
		t.Error("the process that reused a pid was signalled")
	}
}

// TestLegacyStateOrder: entries of the old sidecar's state file carry no
// order; they are listed in the order of their keys (the order in which the
// old sidecar first started them), before anything started since.
func TestLegacyStateOrder(t *testing.T) {
	dir := t.TempDir()
	legacy := `{"services":{` +
		`"zeta":{"name":"zeta","command":"true","cwd":"/","pid":0,"status":"stopped","startedAt":1,"logFile":"/x/zeta.log"},` +
		`"alpha":{"name":"alpha","command":"true","cwd":"/","pid":0,"status":"error","startedAt":2,"logFile":"/x/alpha.log"},` +
		`"mid":{"name":"mid","command":"true","cwd":"/","pid":0,"status":"stopped","startedAt":3,"logFile":"/x/mid.log"}},` +
		`"exposedPort":null}`
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(legacy), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, Config{StateDir: dir})
	if _, err := m.Start(t.Context(), apitype.StartServiceRequest{Name: "beta", Command: "true"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range m.List() {
		got = append(got, s.Name)
	}
	if want := []string{"zeta", "alpha", "mid", "beta"}; !slices.Equal(got, want) {
		t.Errorf("List() names = %q, want %q", got, want)
	}
}
