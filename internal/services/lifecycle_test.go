package services

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
	"github.com/proliferate-ai/sandbox-mcp/internal/statefile"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// markedWith lists the live (non-zombie) processes whose initial environment
// holds key=value exactly.
func markedWith(key, value string) []int {
	ents, _ := os.ReadDir("/proc")
	entry := []byte(key + "=" + value)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if st, err := procfs.ReadStat(pid); err != nil || st.State == 'Z' {
			continue
		}
		if hasEnvEntry(pid, entry) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// instancesOf groups the live processes of service name by instance marker.
func instancesOf(name string) map[string][]int {
	out := map[string][]int{}
	for _, pid := range markedWith(ServiceEnv, name) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			continue
		}
		for kv := range bytes.SplitSeq(b, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte(instanceEnv+"=")); ok {
				out[string(v)] = append(out[string(v)], pid)
			}
		}
	}
	return out
}

// uniqueName is a service name no other test (nor another test run on the
// machine) uses, so processes can be found by their SANDBOX_MCP_SERVICE marker.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), time.Now().UnixNano()%1e9)
}

func TestMonitorNameAndServicePriority(t *testing.T) {
	m := newTestManager(t, Config{})
	info := start(t, m, apitype.StartServiceRequest{Name: "prio", Command: "sleep 300"})
	r, _ := m.record("prio")
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", r.MonitorPID))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(comm)); got != monitorName {
		t.Errorf("monitor comm = %q, want %q (pkill sandbox-mcp must not match it)", got, monitorName)
	}
	cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", r.MonitorPID))
	if want := monitorName + "\x00prio\x00"; string(cl) != want {
		t.Errorf("monitor cmdline = %q, want %q", cl, want)
	}
	if !hasEnvEntry(r.MonitorPID, []byte(monitorEnv+"="+r.Instance)) {
		t.Errorf("monitor lacks %s=%s", monitorEnv, r.Instance)
	}
	if !strings.HasPrefix(r.Instance, m.prefix+"-") {
		t.Errorf("instance %q does not start with the state dir prefix %q", r.Instance, m.prefix)
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", info.PID))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
	if nice := f[19-3]; nice != strconv.Itoa(serviceNice) {
		t.Errorf("service nice = %s, want %d", nice, serviceNice)
	}
	adj, _ := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", info.PID))
	if got := strings.TrimSpace(string(adj)); got != strconv.Itoa(serviceOOMScoreAdj) {
		t.Errorf("service oom_score_adj = %s, want %d", got, serviceOOMScoreAdj)
	}
}

// runBareMonitor starts this test binary as a monitor with spec and returns
// it, its stdin and the first status message.
func runBareMonitor(t *testing.T, spec monitorSpec) (*exec.Cmd, *os.File, monitorMsg, *bufio.Reader) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sr, sw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: os.Args[0], Args: []string{monitorName, spec.Name}}
	cmd.Env = append(os.Environ(), internalEnv+"="+monitorMode, monitorEnv+"="+spec.Instance)
	cmd.Stdin, cmd.ExtraFiles = sr, []*os.File{pw}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	sr.Close()
	t.Cleanup(func() {
		sw.Close()
		_ = killTree(context.Background(), target{instance: spec.Instance}, syscall.SIGKILL, 0)
		cmd.Process.Kill()
		cmd.Wait()
		pr.Close()
	})
	b, _ := json.Marshal(spec)
	if _, err := sw.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(pr)
	msg, err := readMonitorMsg(br)
	if err != nil || msg.Type != msgStarted {
		t.Fatalf("first monitor message = %+v, %v; want started", msg, err)
	}
	return cmd, sw, msg, br
}

// TestMonitorWithoutAckStopsRun: a run the sidecar never acknowledged (it
// was killed, or its state write failed) is stopped by its monitor, double
// forks and new sessions included, whether stdin closes or nothing comes.
func TestMonitorWithoutAckStopsRun(t *testing.T) {
	for _, tc := range []struct {
		name      string
		closeIn   bool
		ackWithin time.Duration
	}{
		{"stdin closed", true, time.Minute},
		{"no ack in time", false, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			id := statePrefix(dir) + "-noack" + strconv.FormatBool(tc.closeIn)
			spec := monitorSpec{
				Name: "noack", Instance: id, Bash: "/bin/bash", Cwd: dir,
				Command: "setsid sleep 301 & ( ( sleep 302 & ) & ); exec sleep 303",
				Env:     []string{instanceEnv + "=" + id, "PATH=" + os.Getenv("PATH")},
				LogPath: filepath.Join(dir, "noack.log"), ExitFile: filepath.Join(dir, "noack.exit"),
				AckTimeoutMs: tc.ackWithin.Milliseconds(),
			}
			cmd, stdin, started, br := runBareMonitor(t, spec)
			waitFor(t, "the service's three sleeps", 5*time.Second, func() bool { return len(markedWith(instanceEnv, id)) >= 3 })
			if tc.closeIn {
				stdin.Close()
			}
			msg, err := readMonitorMsg(br)
			if err != nil || msg.Type != msgError || !strings.Contains(msg.Message, "ack") && !strings.Contains(msg.Message, "sidecar went away") {
				t.Errorf("monitor message after no ack = %+v, %v; want an error about the ack", msg, err)
			}
			werr := cmd.Wait()
			if ee, ok := werr.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
				t.Errorf("monitor exit = %v, want exit status 3", werr)
			}
			if left := markedWith(instanceEnv, id); len(left) > 0 {
				t.Errorf("processes %v of the unacknowledged run (main pid %d) survived", left, started.PID)
			}
		})
	}
}

// TestServiceKillsItsMonitor (issue 12.3): a service that kills its monitor is
// noticed, everything of the run is stopped and its exit recorded, and with
// restart: always no two runs ever coexist.
func TestServiceKillsItsMonitor(t *testing.T) {
	m := newTestManager(t, Config{PollInterval: 20 * time.Millisecond, BackoffBase: 50 * time.Millisecond, StopTimeout: 300 * time.Millisecond})
	name := uniqueName("mk")
	cmd := "sleep 0.2; setsid sleep 300 & kill -9 $PPID; exec sleep 300"
	info := start(t, m, apitype.StartServiceRequest{Name: name, Command: cmd, Restart: apitype.RestartAlways, MaxRestarts: intp(3)})
	if info.Status != apitype.StatusRunning {
		t.Fatalf("start = %+v", info)
	}
	maxRuns := 0
	deadline := time.Now().Add(30 * time.Second)
	for {
		runs := instancesOf(name)
		maxRuns = max(maxRuns, len(runs))
		s := get(t, m, name)
		if s.Status == apitype.StatusError && strings.Contains(s.Reason, "gave up") && len(runs) == 0 {
			if !strings.Contains(s.Reason, "monitor died") || s.Restarts != 3 {
				t.Errorf("final state = %+v, want 3 restarts and the monitor's death as the reason", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no end after 30 s: %+v, runs %v", s, runs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if maxRuns > 1 {
		t.Errorf("saw %d runs of %s at once, want at most 1", maxRuns, name)
	}

	// Without a restart policy: started straight away, reported as it really ends.
	name2 := uniqueName("mk2")
	for i := range 5 {
		_, err := m.Start(t.Context(), apitype.StartServiceRequest{Name: name2, Command: "kill -9 $PPID; exec sleep 300"})
		if err != nil && !strings.Contains(err.Error(), "monitor ended") {
			t.Errorf("start %d: %v", i, err)
		}
		waitFor(t, "no process of "+name2, 10*time.Second, func() bool { return len(markedWith(ServiceEnv, name2)) == 0 })
		if err == nil {
			waitFor(t, name2+" to be reported ended", 10*time.Second, func() bool { return status(m, name2) == apitype.StatusError })
		}
	}
}

// TestOrphanSweep (issue 12.2): at start-up the manager stops every process
// carrying an instance marker of its state dir that no running record claims,
// logs it, and leaves claimed runs and other state dirs' processes alone.
func TestOrphanSweep(t *testing.T) {
	dir := t.TempDir()
	prefix := statePrefix(dir)
	orphanID := prefix + "-0123456789abcdef01234567"
	otherID := statePrefix(t.TempDir()) + "-0123456789abcdef01234567"
	spawn := func(id, cmd string) *exec.Cmd {
		c := exec.Command("bash", "-c", cmd)
		c.Env = append(os.Environ(), instanceEnv+"="+id)
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = killTree(context.Background(), target{instance: id}, syscall.SIGKILL, 0)
			c.Process.Kill()
			c.Wait()
		})
		return c
	}
	// A claimed run, recorded by a manager that then went away.
	first, err := New(Config{StateDir: dir, WorkspaceDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := first.Start(t.Context(), apitype.StartServiceRequest{Name: "kept", Command: "sleep 300"})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	// What a sidecar killed in the middle of a launch leaves: no record.
	spawn(orphanID, "trap '' TERM; setsid sleep 304 & sleep 305")
	other := spawn(otherID, "exec sleep 306")
	waitFor(t, "the orphan's processes", 5*time.Second, func() bool { return len(markedWith(instanceEnv, orphanID)) >= 3 })

	var logs testutil.Buffer
	m := newTestManager(t, Config{StateDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if left := markedWith(instanceEnv, orphanID); len(left) > 0 {
		t.Errorf("orphans %v survived the start-up sweep", left)
	}
	if !strings.Contains(logs.String(), "stopping orphaned processes") || !strings.Contains(logs.String(), orphanID) {
		t.Errorf("sweep log does not name the orphan run:\n%s", logs.String())
	}
	if !processExists(other.Process.Pid) {
		t.Error("a process of another state dir was swept")
	}
	if s := get(t, m, "kept"); s.Status != apitype.StatusRunning || !processExists(kept.PID) {
		t.Errorf("claimed run = %+v (alive %v), want running", s, processExists(kept.PID))
	}
}

// TestSweepSparesConcurrentLaunches: managers starting up on a state dir
// (the MCP mode next to the API) never sweep a run another one is launching.
func TestSweepSparesConcurrentLaunches(t *testing.T) {
	m := newTestManager(t, Config{})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			other, err := New(Config{StateDir: m.cfg.StateDir, WorkspaceDir: m.cfg.WorkspaceDir})
			if err != nil {
				t.Error(err)
				return
			}
			other.Close()
		}
	}()
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := m.Start(context.Background(), apitype.StartServiceRequest{Name: fmt.Sprintf("c%d", i), Command: "sleep 300"}); err != nil {
				t.Error(err)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	list := m.List()
	if len(list) != 8 {
		t.Fatalf("List = %d services, want 8", len(list))
	}
	for _, s := range list {
		if s.Status != apitype.StatusRunning || !processExists(s.PID) {
			t.Errorf("%s = %s (alive %v), want running: swept while launching?", s.Name, s.Status, processExists(s.PID))
		}
	}
}

// TestUntrustedStateEntries (issue 12.7): process ids no sidecar would write
// are refused, and a bad exposed port is dropped.
func TestUntrustedStateEntries(t *testing.T) {
	dir := t.TempDir()
	state := fmt.Sprintf(`{"services":{
		"one":{"command":"sleep 1","cwd":"/","pid":1,"pgid":1,"startTime":1,"status":"running","instance":"x1"},
		"neg":{"command":"sleep 1","cwd":"/","pid":-5,"pgid":-5,"status":"running","instance":"x2"},
		"group":{"command":"sleep 1","cwd":"/","pid":%d,"pgid":%d,"status":"running","instance":"x3"},
		"fine":{"command":"sleep 1","cwd":"/","status":"stopped"}},
		"exposedPort":70000}`, syscall.Getpgrp(), syscall.Getpgrp())
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs testutil.Buffer
	m := newTestManager(t, Config{StateDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, name := range []string{"one", "neg", "group"} {
		s := get(t, m, name)
		if s.Status != apitype.StatusError || s.PID != 0 || !strings.Contains(s.Reason, "refused") {
			t.Errorf("%s = %+v, want refused (error, no pid)", name, s)
		}
		if err := m.Stop(t.Context(), name); err != nil {
			t.Errorf("Stop(%s): %v", name, err)
		}
	}
	if p, _ := (statefile.ExposedPort{Dir: dir}).Load(); p != nil {
		t.Errorf("exposed port = %d, want none", *p)
	}
	if !strings.Contains(logs.String(), "refused") {
		t.Errorf("no log line about the refused entries:\n%s", logs.String())
	}
}

// TestUnusableStateFileMovedAside (issue 12.7): a state.json that is a
// directory or a FIFO does not stop the sidecar; it is moved aside with a log line.
func TestUnusableStateFileMovedAside(t *testing.T) {
	for _, kind := range []string{"dir", "fifo"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "state.json")
			var err error
			if kind == "dir" {
				err = os.Mkdir(p, 0o755)
			} else {
				err = syscall.Mkfifo(p, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			var logs testutil.Buffer
			m := newTestManager(t, Config{StateDir: dir, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			start(t, m, apitype.StartServiceRequest{Name: "after", Command: "sleep 300"})
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				t.Errorf("state.json after a start: %v, %v; want a regular file", fi, err)
			}
			aside, _ := filepath.Glob(p + ".corrupt-*")
			if len(aside) != 1 || !strings.Contains(logs.String(), "moved aside") {
				t.Errorf("moved aside: %v; log:\n%s", aside, logs.String())
			}
		})
	}
}

// TestStateDirRecreated (issue 12.6): a state dir deleted while services run
// is created again (lock file included) and the state written from memory.
func TestStateDirRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	m := newTestManager(t, Config{StateDir: dir})
	a := start(t, m, apitype.StartServiceRequest{Name: "a", Command: "sleep 300"})
	start(t, m, apitype.StartServiceRequest{Name: "b", Command: "sleep 300"})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(t.Context(), "a"); err != nil {
		t.Fatalf("Stop after the state dir was deleted: %v", err)
	}
	if processExists(a.PID) {
		t.Error("service still alive after Stop")
	}
	st, _, err := readState(filepath.Join(dir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r := st.Services["a"]; r == nil || r.Status != apitype.StatusStopped {
		t.Errorf("a on disk = %+v, want stopped", r)
	}
	if r := st.Services["b"]; r == nil || r.Status != apitype.StatusRunning {
		t.Errorf("b on disk = %+v, want still running", r)
	}
	if _, err := os.Stat(filepath.Join(dir, "state.lock")); err != nil {
		t.Errorf("lock file not recreated: %v", err)
	}
	start(t, m, apitype.StartServiceRequest{Name: "c", Command: "sleep 300"})
}

// TestAdoptedRunWhoseMonitorDies: a run adopted from a sidecar killed with
// SIGKILL (watched by polling, not through the monitor's pipe) is stopped
// entirely when its monitor dies, and reported as such.
func TestAdoptedRunWhoseMonitorDies(t *testing.T) {
	stateDir := t.TempDir()
	name := uniqueName("adm")
	startHelperSidecar(t, stateDir, name+"=sleep 1; setsid sleep 300 & kill -9 $PPID; exec sleep 300")
	m := newTestManager(t, Config{StateDir: stateDir, PollInterval: 20 * time.Millisecond, StopTimeout: 300 * time.Millisecond})
	if s := get(t, m, name); s.Status != apitype.StatusRunning {
		t.Fatalf("adopted %+v, want running", s)
	}
	waitFor(t, name+" to be reported ended", 20*time.Second, func() bool { return status(m, name) == apitype.StatusError })
	if s := get(t, m, name); !strings.Contains(s.Reason, "monitor died") {
		t.Errorf("reason = %q, want the monitor's death", s.Reason)
	}
	waitFor(t, "no process of "+name, 10*time.Second, func() bool { return len(markedWith(ServiceEnv, name)) == 0 })
}

// TestNeverSignalsInitOrOwnGroup: whatever a target says, the group of pid 1
// (kill(-1) would signal every process) and the caller's own group are never signalled.
func TestNeverSignalsInitOrOwnGroup(t *testing.T) {
	for _, pgid := range []int{-1, 0, 1, syscall.Getpgrp()} {
		if _, groupOK := findProcs(target{pgid: pgid}); groupOK {
			t.Errorf("findProcs(pgid %d) allows signalling the group", pgid)
		}
	}
}

// FuzzStateFile: whatever state.json holds, reading it never panics, and
// what survives sanitizeState names no process the sidecar must never signal
// and round-trips through encodeState.
func FuzzStateFile(f *testing.F) {
	f.Add([]byte(`{"services":{"a":{"command":"x","pid":1,"pgid":1,"status":"running"}},"exposedPort":70000}`))
	f.Add([]byte(`{"services":{"b":{"command":"y","pid":42,"pgid":42,"startTime":7,"monitorPid":41,"status":"running","instance":"p-1"}},"exposedPort":3000}`))
	f.Add([]byte(`{"services":null}`))
	f.Add([]byte(`not json`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "state.json")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		st, _, _, err := readStateRaw(p)
		if err != nil {
			return
		}
		sanitizeState(st)
		for name, r := range st.Services {
			for _, pid := range []int{r.PID, r.PGID, r.MonitorPID} {
				if pid < 0 || pid == 1 || pid == os.Getpid() || pid == syscall.Getpgrp() {
					t.Fatalf("%s kept pid %d after sanitizeState", name, pid)
				}
			}
		}
		enc, err := encodeState(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, enc, 0o600); err != nil {
			t.Fatal(err)
		}
		if port, err := (statefile.ExposedPort{Dir: dir}).Load(); err == nil && port != nil && (*port < 1 || *port > 65535) {
			t.Fatalf("exposure reads exposedPort %d from our encoding", *port)
		}
		again, _, _, err := readStateRaw(p)
		if err != nil {
			t.Fatalf("re-read of our own encoding: %v", err)
		}
		if len(again.Services) != len(st.Services) {
			t.Fatalf("round trip: %d services, want %d", len(again.Services), len(st.Services))
		}
	})
}

// TestStateFileReplacedWhileRunning: a state.json replaced by garbage or a
// directory while services run is moved aside and written again from memory.
func TestStateFileReplacedWhileRunning(t *testing.T) {
	for _, kind := range []string{"garbage", "dir"} {
		t.Run(kind, func(t *testing.T) {
			m := newTestManager(t, Config{PollInterval: 20 * time.Millisecond})
			start(t, m, apitype.StartServiceRequest{Name: "kept", Command: "sleep 300"})
			p := filepath.Join(m.cfg.StateDir, "state.json")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			var err error
			if kind == "dir" {
				err = os.Mkdir(p, 0o755)
			} else {
				err = os.WriteFile(p, []byte("{garbage"), 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "state.json to be written again", 10*time.Second, func() bool {
				st, _, err := readState(p)
				return err == nil && st.Services["kept"] != nil && st.Services["kept"].Status == apitype.StatusRunning
			})
			if list := m.List(); len(list) != 1 || list[0].Status != apitype.StatusRunning {
				t.Errorf("List = %+v, want kept running", list)
			}
		})
	}
}
