package services

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

func intp(n int) *int { return &n }

// events collects the events of one service until want of them arrived.
func collect(t *testing.T, ch <-chan apitype.Event, service string, n int) []apitype.Event {
	t.Helper()
	var got []apitype.Event
	timeout := time.After(30 * time.Second)
	for len(got) < n {
		select {
		case ev := <-ch:
			if ev.Service == service {
				got = append(got, ev)
			}
		case <-timeout:
			t.Fatalf("timed out after %d events of %s: %v", len(got), service, types(got))
		}
	}
	return got
}

func types(evs []apitype.Event) string {
	var s []string
	for _, ev := range evs {
		x := ev.Type
		if ev.ExitCode != nil {
			x += fmt.Sprint("(", *ev.ExitCode, ")")
		}
		s = append(s, x)
	}
	return strings.Join(s, " ")
}

func TestRestartOnFailureGivesUp(t *testing.T) {
	m := newTestManager(t, Config{BackoffBase: 100 * time.Millisecond})
	ch, unsub := m.Subscribe()
	defer unsub()
	start(t, m, apitype.StartServiceRequest{Name: "crash", Command: "sleep 0.2; exit 1", Restart: apitype.RestartOnFailure, MaxRestarts: intp(2)})
	evs := collect(t, ch, "crash", 10)
	if got, want := types(evs), "started ready exited(1) restarting started ready exited(1) restarting started ready"; got != want {
		t.Fatalf("events = %s, want %s", got, want)
	}
	d1 := time.Duration(*evs[3].NextRestartAt-evs[3].Time) * time.Millisecond
	d2 := time.Duration(*evs[7].NextRestartAt-evs[7].Time) * time.Millisecond
	if d1 < 90*time.Millisecond || d2 < 190*time.Millisecond || d2 <= d1 {
		t.Errorf("restart delays %v then %v, want about 100ms then 200ms", d1, d2)
	}
	waitFor(t, "the service to give up", 20*time.Second, func() bool {
		s := get(t, m, "crash")
		return s.Status == apitype.StatusError && strings.Contains(s.Reason, "gave up after 2 restarts")
	})
	s := get(t, m, "crash")
	if s.Restarts != 2 || s.NextRestartAt != nil || s.ExitCode == nil || *s.ExitCode != 1 {
		t.Errorf("after giving up: %+v, want 2 restarts, exit code 1, no pending restart", s)
	}
}

func TestRestartPolicyOnCleanExit(t *testing.T) {
	m := newTestManager(t, Config{BackoffBase: 50 * time.Millisecond})
	ch, unsub := m.Subscribe()
	defer unsub()
	start(t, m, apitype.StartServiceRequest{Name: "once", Command: "exit 0", Restart: apitype.RestartOnFailure})
	start(t, m, apitype.StartServiceRequest{Name: "again", Command: "sleep 0.1", Restart: apitype.RestartAlways, MaxRestarts: intp(1)})
	if got := types(collect(t, ch, "again", 6)); got != "started ready exited(0) restarting started ready" {
		t.Errorf("always: events = %s", got)
	}
	waitFor(t, "once to stop", 10*time.Second, func() bool { return status(m, "once") == apitype.StatusStopped })
	if s := get(t, m, "once"); s.Restarts != 0 || s.NextRestartAt != nil {
		t.Errorf("on-failure after exit 0 = %+v, want no restart", s)
	}
}

func TestStopDuringBackoff(t *testing.T) {
	m := newTestManager(t, Config{BackoffBase: 500 * time.Millisecond})
	ch, unsub := m.Subscribe()
	defer unsub()
	start(t, m, apitype.StartServiceRequest{Name: "flap", Command: "exit 2", Restart: apitype.RestartAlways})
	evs := collect(t, ch, "flap", 4)
	if types(evs) != "started ready exited(2) restarting" {
		t.Fatalf("events = %s", types(evs))
	}
	if s := get(t, m, "flap"); s.Status != apitype.StatusError || s.NextRestartAt == nil {
		t.Errorf("while waiting to restart: %+v, want error with nextRestartAt", s)
	}
	if err := m.Stop(t.Context(), "flap"); err != nil {
		t.Fatal(err)
	}
	if got := types(collect(t, ch, "flap", 1)); got != "stopped" {
		t.Errorf("event after Stop = %s, want stopped", got)
	}
	// Past the pending restart's time: nothing may start.
	time.Sleep(time.Second)
	if s := get(t, m, "flap"); s.Status != apitype.StatusStopped || s.NextRestartAt != nil {
		t.Errorf("after Stop during backoff: %+v, want stopped with no pending restart", s)
	}
	select {
	case ev := <-ch:
		t.Errorf("event after Stop during backoff: %+v, want none", ev)
	default:
	}
}

func TestReadinessTCP(t *testing.T) {
	m := newTestManager(t, Config{})
	ch, unsub := m.Subscribe()
	defer unsub()
	port := testutil.FreePort(t)
	// A server that binds after 1 s.
	cmd := fmt.Sprintf(`sleep 1; exec python3 -c 'import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", %d)); s.listen(); time.sleep(300)'`, port)
	if _, err := exec.LookPath("python3"); err != nil {
		cmd = fmt.Sprintf("sleep 1; exec nc -l 127.0.0.1 %d", port)
	}
	info := start(t, m, apitype.StartServiceRequest{Name: "tcp", Command: cmd, Readiness: &apitype.Readiness{TCP: &port, TimeoutMs: 30000}})
	if info.Ready {
		t.Fatalf("Start = %+v, want not ready before the port listens", info)
	}
	var bound time.Time
	for bound.IsZero() {
		if c, err := net.DialTimeout("tcp", fmt.Sprint("127.0.0.1:", port), 100*time.Millisecond); err == nil {
			c.Close()
			bound = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
	evs := collect(t, ch, "tcp", 2)
	readyAt := time.Now()
	if types(evs) != "started ready" {
		t.Fatalf("events = %s, want started ready", types(evs))
	}
	// The probe runs every 50 ms; allow for a loaded machine.
	t.Logf("ready %v after the port accepted connections", readyAt.Sub(bound))
	if d := readyAt.Sub(bound); d > 2*time.Second {
		t.Errorf("ready %v after binding, want within a probe interval or two", d)
	}
	if !get(t, m, "tcp").Ready {
		t.Error("ServiceInfo.Ready = false after the ready event")
	}
}

func TestReadinessHTTPAndLog(t *testing.T) {
	m := newTestManager(t, Config{})
	ch, unsub := m.Subscribe()
	defer unsub()
	ts := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok" {
			w.WriteHeader(204)
			return
		}
		w.WriteHeader(500)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go ts.Serve(ln)
	defer ts.Close()
	// The service serves the URL itself: a server of anyone else's never counts.
	port := testutil.FreePort(t)
	start(t, m, apitype.StartServiceRequest{Name: "http", Command: fmt.Sprintf("exec python3 -m http.server %d --bind 127.0.0.1", port),
		Readiness: &apitype.Readiness{HTTP: fmt.Sprintf("http://127.0.0.1:%d/", port)}})
	if got := types(collect(t, ch, "http", 2)); got != "started ready" {
		t.Errorf("http readiness: events = %s", got)
	}
	start(t, m, apitype.StartServiceRequest{Name: "log", Command: "echo booting; sleep 0.3; echo 'listening on :8080'; sleep 300", Readiness: &apitype.Readiness{Log: `listening on :\d+`}})
	if got := types(collect(t, ch, "log", 2)); got != "started ready" {
		t.Errorf("log readiness: events = %s", got)
	}
	start(t, m, apitype.StartServiceRequest{Name: "bad", Command: "sleep 300", Readiness: &apitype.Readiness{HTTP: "http://" + ln.Addr().String() + "/fail", TimeoutMs: 300}})
	evs := collect(t, ch, "bad", 2)
	if types(evs) != "started exited(143)" || !strings.HasPrefix(evs[1].Reason, "not ready after 300 ms: GET http://") {
		t.Errorf("failing readiness: events = %s (%q), want started exited(143) with the reason", types(evs), evs[1].Reason)
	}
}

func TestReadinessTimeout(t *testing.T) {
	m := newTestManager(t, Config{})
	port := testutil.FreePort(t)
	start(t, m, apitype.StartServiceRequest{Name: "never", Command: "sleep 300", Readiness: &apitype.Readiness{TCP: &port, TimeoutMs: 300}})
	waitFor(t, "the readiness timeout", 20*time.Second, func() bool { return status(m, "never") == apitype.StatusError })
	s := get(t, m, "never")
	want := fmt.Sprintf("not ready after 300 ms: nothing accepts connections on port %d", port)
	if s.Reason != want || s.Ready {
		t.Errorf("after readiness timeout: reason %q ready %v, want %q, not ready", s.Reason, s.Ready, want)
	}
	if left := procsOf(m, "never"); len(left) > 0 {
		t.Errorf("processes %v left after the readiness timeout", left)
	}
}

// TestEventSequence: start → ready → crash → restarting → ready → stop, in order.
func TestEventSequence(t *testing.T) {
	m := newTestManager(t, Config{BackoffBase: 100 * time.Millisecond})
	ch, unsub := m.Subscribe()
	defer unsub()
	dir := t.TempDir()
	cmd := "echo up; if [ -e crashed ]; then sleep 300; else touch crashed; sleep 0.3; exit 4; fi"
	start(t, m, apitype.StartServiceRequest{Name: "seq", Command: cmd, Cwd: dir, Restart: apitype.RestartOnFailure, Readiness: &apitype.Readiness{Log: "(?m)^up$"}})
	evs := collect(t, ch, "seq", 6)
	if err := m.Stop(t.Context(), "seq"); err != nil {
		t.Fatal(err)
	}
	evs = append(evs, collect(t, ch, "seq", 1)...)
	if got, want := types(evs), "started ready exited(4) restarting started ready stopped"; got != want {
		t.Errorf("events = %s, want %s", got, want)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Time < evs[i-1].Time {
			t.Errorf("event %d time %d before %d", i, evs[i].Time, evs[i-1].Time)
		}
	}
}

func TestRotatingWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.log")
	w, err := openRotating(path, 100, 2)
	if err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for i := range 30 {
		chunk := []byte(strings.Repeat(fmt.Sprint(i%10), 7+i%5) + "\n")
		all.Write(chunk)
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	var got []byte
	for _, p := range []string{path + ".2", path + ".1", path} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("read %s: %v", p, err)
		}
		if len(b) > 100+12 {
			t.Errorf("%s has %d bytes, want about the 100-byte limit", p, len(b))
		}
		got = append(got, b...)
	}
	// Only whole files fall off: what is kept is a suffix of what was written.
	if !bytes.HasSuffix(all.Bytes(), got) || len(got) < 200 {
		t.Errorf("log.2+log.1+log = %q, want a suffix of %q", got, all.Bytes())
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("x.log.3 exists with keep=2")
	}
}

// TestRotationByteExact runs a service that writes more than the log limit
// and checks that the rotated files together hold exactly its output.
func TestRotationByteExact(t *testing.T) {
	m := newTestManager(t, Config{LogMaxBytes: 8000, LogKeep: 2})
	dir := t.TempDir()
	start(t, m, apitype.StartServiceRequest{Name: "rot", Command: "seq 1 5000", Cwd: dir})
	waitFor(t, "the service to finish", 20*time.Second, func() bool { return status(m, "rot") == apitype.StatusStopped })
	want, err := exec.Command("seq", "1", "5000").Output()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(m.cfg.StateDir, "logs", "rot.log")
	var got []byte
	for _, p := range []string{path + ".2", path + ".1", path} {
		b, _ := os.ReadFile(p)
		got = append(got, b...)
	}
	if _, err := os.Stat(path + ".1"); err != nil {
		t.Fatalf("no rotation happened: %v", err)
	}
	marker := "\n=== Service \"rot\" started at "
	i := bytes.Index(got, []byte("Working directory: "+dir+"\n\n"))
	if !bytes.HasPrefix(got, []byte(marker)) || i < 0 {
		t.Fatalf("rotated logs do not start with the marker: %q", got[:min(len(got), 200)])
	}
	body := got[i+len("Working directory: "+dir+"\n\n"):]
	if !bytes.Equal(body, want) {
		t.Errorf("rotated logs hold %d bytes of output, want the %d bytes written, byte for byte", len(body), len(want))
	}
}

// startHelperSidecar runs a sidecar in another process, lets it start the
// given services, then kills it with SIGKILL.
func startHelperSidecar(t *testing.T, stateDir, commands string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SERVICES_TEST_HELPER=sidecar", "SERVICES_TEST_STATE="+stateDir, "SERVICES_TEST_COMMANDS="+commands)
	cmd.Env = append(cmd.Env, env...)
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
}

// TestReadoptedKeepsPolicy: the restart policy survives a sidecar killed with SIGKILL.
func TestReadoptedKeepsPolicy(t *testing.T) {
	stateDir := t.TempDir()
	startHelperSidecar(t, stateDir, "flaky=sleep 1; exit 5", "SERVICES_TEST_RESTART=on-failure")
	m := newTestManager(t, Config{StateDir: stateDir, PollInterval: 20 * time.Millisecond, BackoffBase: 50 * time.Millisecond})
	first := get(t, m, "flaky")
	if first.Status != apitype.StatusRunning || first.Restart != apitype.RestartOnFailure {
		t.Fatalf("after re-adoption: %+v, want running with restart on-failure", first)
	}
	waitFor(t, "the re-adopted service to be restarted", 20*time.Second, func() bool {
		s := get(t, m, "flaky")
		return s.Restarts == 1 && s.PID != first.PID && s.Status == apitype.StatusRunning
	})
	waitFor(t, "it to give up", 20*time.Second, func() bool {
		s := get(t, m, "flaky")
		return s.Status == apitype.StatusError && strings.Contains(s.Reason, "gave up after 1 restarts")
	})
}

// TestSharedStateDir: two managers on one state dir (the API server and the
// MCP mode) see each other's services, and a stop by one is not taken for a
// crash by the other.
func TestSharedStateDir(t *testing.T) {
	a := newTestManager(t, Config{PollInterval: 20 * time.Millisecond, BackoffBase: 50 * time.Millisecond})
	b := newTestManager(t, Config{StateDir: a.cfg.StateDir, WorkspaceDir: a.cfg.WorkspaceDir, PollInterval: 20 * time.Millisecond, BackoffBase: 50 * time.Millisecond})
	start(t, a, apitype.StartServiceRequest{Name: "shared", Command: "sleep 300", Restart: apitype.RestartAlways})
	start(t, b, apitype.StartServiceRequest{Name: "other", Command: "sleep 300"})
	for _, m := range []*Manager{a, b} {
		list := m.List()
		if len(list) != 2 || list[0].Name != "shared" || list[1].Name != "other" {
			t.Fatalf("List = %+v, want shared and other", list)
		}
	}
	pid := get(t, a, "shared").PID
	if err := b.Stop(t.Context(), "shared"); err != nil {
		t.Fatal(err)
	}
	if processExists(pid) {
		t.Errorf("pid %d alive after the other manager stopped it", pid)
	}
	// Give a wrongly triggered restart every chance to happen.
	time.Sleep(500 * time.Millisecond)
	for _, m := range []*Manager{a, b} {
		if s := get(t, m, "shared"); s.Status != apitype.StatusStopped || s.Restarts != 0 {
			t.Errorf("shared = %+v, want stopped and never restarted", s)
		}
	}
}

// TestRestartCycleNeverLooksGivenUp polls a crashing service through its
// whole restart cycle, many times over: every state it shows is running,
// waiting to restart (error with nextRestartAt) or, once its last restart
// ended, given up — and given up never comes before that last restart.
func TestRestartCycleNeverLooksGivenUp(t *testing.T) {
	const rounds, maxRestarts = 12, 2
	m := newTestManager(t, Config{BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	for round := range rounds {
		name := fmt.Sprintf("crash-%d", round)
		start(t, m, apitype.StartServiceRequest{Name: name, Command: "exit 1", Restart: apitype.RestartOnFailure, MaxRestarts: intp(maxRestarts)})
		var (
			seen     = map[string]bool{}
			restarts = 0
			finalAt  = -1
			deadline = time.Now().Add(30 * time.Second)
		)
		for poll := 0; finalAt < 0 || poll < finalAt+200; poll++ {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %s did not give up within 30s; states seen: %v", round, name, seen)
			}
			s := get(t, m, name)
			waiting := s.NextRestartAt != nil
			state := fmt.Sprintf("%s restarts=%d waiting=%v", s.Status, s.Restarts, waiting)
			seen[state] = true
			if s.Restarts < restarts {
				t.Fatalf("round %d poll %d: restarts went from %d to %d", round, poll, restarts, s.Restarts)
			}
			restarts = s.Restarts
			switch {
			case s.Status == apitype.StatusRunning && !waiting && finalAt < 0:
			case s.Status == apitype.StatusError && waiting && finalAt < 0:
			case s.Status == apitype.StatusError && !waiting && s.Restarts == maxRestarts && strings.Contains(s.Reason, "gave up after 2 restarts"):
				if finalAt < 0 {
					finalAt = poll
				}
			default:
				t.Fatalf("round %d poll %d: state %+v (%s), want running, waiting to restart, or given up after its last restart", round, poll, s, state)
			}
		}
		if !seen["error restarts=1 waiting=true"] && !seen["error restarts=2 waiting=true"] {
			t.Logf("round %d: no waiting state observed (states %v)", round, seen)
		}
	}
}
