package local

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// helperEnv makes the test binary, run inside a sandbox, a small TCP server.
const helperEnv = "LOCAL_ENGINE_TEST_HELPER"

// testHelper runs the helper mode and reports whether it did (it never returns then).
func testHelper() bool {
	switch os.Getenv(helperEnv) {
	case "":
		return false
	case "echo":
		// A line-echo server on the port in argv: it answers "<hostname> <line>".
		ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[len(os.Args)-1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		host, _ := os.Hostname()
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintf(c, "%s %s\n", host, sc.Text())
				}
			}()
		}
	case "sink":
		// Reads every connection to its end, then answers with the byte count.
		ln, err := net.Listen("tcp", "127.0.0.1:"+os.Args[len(os.Args)-1])
		if err != nil {
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1<<20)
				var n int64
				for {
					m, err := c.Read(buf)
					n += int64(m)
					if err != nil {
						break
					}
				}
				fmt.Fprintf(c, "%d\n", n)
			}()
		}
	}
	os.Exit(2)
	return true
}

func newTestEngine(t *testing.T) *Engine {
	t.Helper()
	e, err := NewEngine(EngineOptions{DataDir: t.TempDir(), SandboxMCP: sandboxMCP})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func createBox(t *testing.T, e *Engine, spec engine.Spec) engine.Info {
	t.Helper()
	info, err := e.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Terminate(context.Background(), info.ID); err != nil {
			t.Errorf("terminate: %v", err)
		}
	})
	return info
}

func sh(t *testing.T, e *Engine, id string, argv ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code, err := e.Exec(t.Context(), id, engine.ExecRequest{Argv: argv, Stdout: &out, Stderr: &out, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", argv, err)
	}
	return out.String(), code
}

func testBinaryMount(t *testing.T) engine.Mount {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return engine.Mount{Source: exe, Target: "/opt/enginetest/helper", ReadOnly: true}
}

func TestEngineSandbox(t *testing.T) {
	e := newTestEngine(t)
	if !e.Capabilities().Isolated {
		t.Fatal("an engine made without Unisolated is not isolated")
	}
	info := createBox(t, e, engine.Spec{Env: []string{"GREETING=hello"}, Ports: []int{7000},
		Mounts: []engine.Mount{testBinaryMount(t)}, Labels: map[string]string{"k": "v"}})
	if info.State != engine.StateRunning || !info.Isolated || len(info.Tunnels) != 1 || info.Labels["k"] != "v" {
		t.Fatalf("info = %+v", info)
	}

	out, code := sh(t, e, info.ID, "bash", "-c", `echo "$GREETING $(hostname) $HOME $(pwd)"; exit 3`)
	if code != 3 || out != fmt.Sprintf("hello %s /home/user /home/user\n", info.ID) {
		t.Errorf("exec = %q, %d", out, code)
	}
	// Only the sandbox's own processes: init, the spawner and ps itself.
	out, _ = sh(t, e, info.ID, "ps", "-e", "-o", "pid=,comm=")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || strings.TrimSpace(lines[0]) != "1 sandbox-init" ||
		!strings.HasSuffix(lines[1], " sandbox-spawner") {
		t.Errorf("ps inside shows %q, want only init, the spawner and ps", out)
	}
	for _, d := range []string{"/home/user/workspace", "/home/user/.proliferate", "/tmp/proliferate"} {
		if fi, err := e.Stat(t.Context(), info.ID, d); err != nil || !fi.IsDir {
			t.Errorf("stat %s = %+v, %v", d, fi, err)
		}
	}
	if _, code := sh(t, e, info.ID, "test", "-x", SandboxMCPPath); code != 0 {
		t.Errorf("%s is not executable inside", SandboxMCPPath)
	}
	// Init's descriptors (its way back to the host) are out of reach.
	if out, _ := sh(t, e, info.ID, "bash", "-c", `sp=$(pgrep -x sandbox-spawner); for f in /proc/1/fd/* /proc/1/root /proc/1/cwd /proc/$sp/fd/* /proc/$sp/exe /proc/$sp/mem; do
		if readlink $f >/dev/null 2>&1 || ls $f/ >/dev/null 2>&1; then echo $f; fi; done; cat /proc/1/environ 2>/dev/null`); out != "" {
		t.Errorf("init's descriptors, root or environment are reachable inside: %q", out)
	}
	// The host's root is read-only, even for root inside.
	if out, code := sh(t, e, info.ID, "bash", "-c", "touch /usr/x || mount -o remount,rw /usr"); code == 0 {
		t.Errorf("wrote to the host's /usr: %q", out)
	}

	// Stdin, stderr and timeouts.
	var stdout, stderr bytes.Buffer
	code, err := e.Exec(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"bash", "-c", "tr a-z A-Z; echo err >&2"},
		Stdin: strings.NewReader("abc"), Stdout: &stdout, Stderr: &stderr})
	if err != nil || code != 0 || stdout.String() != "ABC" || stderr.String() != "err\n" {
		t.Errorf("exec with stdin = %d, %v, %q, %q", code, err, stdout.String(), stderr.String())
	}
	code, err = e.Exec(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"sleep", "10"}, Timeout: 50 * time.Millisecond})
	if code != 124 || !errors.Is(err, engine.ErrTimeout) {
		t.Errorf("timed out exec = %d, %v", code, err)
	}
	stderr.Reset()
	code, err = e.Exec(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"no-such-program"}, Stderr: &stderr})
	if code != 127 || err != nil || !strings.Contains(stderr.String(), "not found") {
		t.Errorf("exec of a missing program = %d, %v, %q", code, err, stderr.String())
	}

	// Files, resolved inside the sandbox.
	if err := e.WriteFile(t.Context(), info.ID, "/home/user/a/b.txt", []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(info.Home, "a/b.txt")); err != nil || string(b) != "data" {
		t.Errorf("host view of /home/user/a/b.txt = %q, %v", b, err)
	}
	if out, _ := sh(t, e, info.ID, "cat", "/home/user/a/b.txt"); out != "data" {
		t.Errorf("cat inside = %q", out)
	}
	if _, err := os.Stat("/home/user/a/b.txt"); err == nil {
		t.Error("the file is on the host's /home/user")
	}
	sh(t, e, info.ID, "ln", "-s", "/../../../etc/hostname", "/home/user/link")
	if b, err := e.ReadFile(t.Context(), info.ID, "/home/user/link"); err != nil || strings.TrimSpace(string(b)) == "" {
		t.Errorf("read through a symlink = %q, %v", b, err)
	}
	list, err := e.ListFiles(t.Context(), info.ID, "/home/user/a")
	if err != nil || len(list) != 1 || list[0].Name != "b.txt" || list[0].Size != 4 || list[0].Mode&0o777 != 0o600 {
		t.Errorf("ListFiles = %+v, %v", list, err)
	}
	if err := e.Remove(t.Context(), info.ID, "/home/user/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Stat(t.Context(), info.ID, "/home/user/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat after remove = %v", err)
	}

	// A server inside, reached through DialPort and through the tunnel.
	pid, err := e.StartDetached(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"/opt/enginetest/helper", "7000"},
		Env: []string{helperEnv + "=echo"}})
	if err != nil || pid <= 1 {
		t.Fatalf("start the helper = %d, %v", pid, err)
	}
	var c net.Conn
	for range 200 {
		if c, err = e.DialPort(t.Context(), info.ID, 7000); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := echo(t, c, "one"); got != info.ID+" one" {
		t.Errorf("DialPort echo = %q", got)
	}
	tc, err := net.Dial("tcp", net.JoinHostPort(info.Tunnels[0].Host, fmt.Sprint(info.Tunnels[0].HostPort)))
	if err != nil {
		t.Fatal(err)
	}
	if got := echo(t, tc, "two"); got != info.ID+" two" {
		t.Errorf("tunnel echo = %q", got)
	}
	// The port is not on the host's loopback.
	if hc, err := net.Dial("tcp", "127.0.0.1:7000"); err == nil {
		hc.Close()
		t.Log("something listens on the host's 127.0.0.1:7000 (not the sandbox's)")
	}
}

func echo(t *testing.T, c net.Conn, line string) string {
	t.Helper()
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(c, line)
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(got)
}

func TestEngineTerminateLeavesNothing(t *testing.T) {
	e := newTestEngine(t)
	info, err := e.Create(t.Context(), engine.Spec{Ports: []int{80}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.StartDetached(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	bx, _ := e.lookup(info.ID)
	st := bx.st
	if !procLeft(st) {
		t.Fatal("no process of the sandbox found before terminate")
	}
	if err := e.Terminate(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if procLeft(st) {
		t.Error("processes of the sandbox remain in /proc")
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mi, []byte(info.ID)) {
		t.Error("a mount of the sandbox is on the host")
	}
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", info.Tunnels[0].HostPort)); err == nil {
		c.Close()
		t.Error("the tunnel still listens")
	}
	if _, err := os.Stat(info.Home); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the sandbox's directory remains: %v", err)
	}
	if err := e.Terminate(t.Context(), info.ID); err != nil {
		t.Errorf("terminate again = %v", err)
	}
	if _, err := e.Get(t.Context(), info.ID); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("Get after terminate = %v", err)
	}
}

// TestEngineTerminateWhileWatched: a Get and List running against a sandbox while it
// is terminated never write its state file into the directory being removed, so every
// terminate succeeds and leaves no directory.
func TestEngineTerminateWhileWatched(t *testing.T) {
	e := newTestEngine(t)
	for range 5 {
		info, err := e.Create(t.Context(), engine.Spec{})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _ = e.Get(context.Background(), info.ID)
					_, _ = e.List(context.Background())
				}
			}()
		}
		err = e.Terminate(t.Context(), info.ID)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatalf("terminate while watched: %v", err)
		}
		if _, err := os.Stat(info.Home); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("the sandbox's directory remains: %v", err)
		}
	}
}

func TestEngineTwoSandboxesKillAll(t *testing.T) {
	e := newTestEngine(t)
	a := createBox(t, e, engine.Spec{})
	b := createBox(t, e, engine.Spec{})
	if _, err := e.StartDetached(t.Context(), b.ID, engine.ExecRequest{Argv: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	// kill -9 -1 inside a: everything it may signal, which is only its own processes.
	sh(t, e, a.ID, "bash", "-c", "kill -9 -1; true")
	for _, id := range []string{a.ID, b.ID} {
		if out, code := sh(t, e, id, "echo", "alive"); code != 0 || out != "alive\n" {
			t.Errorf("sandbox %s after kill -9 -1 in %s: %q %d", id, a.ID, out, code)
		}
	}
	if out, _ := sh(t, e, b.ID, "pgrep", "-x", "sleep"); strings.TrimSpace(out) == "" {
		t.Error("the other sandbox's sleep was killed")
	}
}

func TestEngineSnapshotRestore(t *testing.T) {
	e := newTestEngine(t)
	a := createBox(t, e, engine.Spec{})
	sh(t, e, a.ID, "bash", "-c", "echo kept > /home/user/workspace/f; echo t > /tmp/t")
	snap, err := e.Snapshot(t.Context(), a.ID)
	if err != nil {
		t.Fatal(err)
	}
	b := createBox(t, e, engine.Spec{Snapshot: snap})
	if out, _ := sh(t, e, b.ID, "cat", "/home/user/workspace/f", "/tmp/t"); out != "kept\nt\n" {
		t.Errorf("restored files = %q", out)
	}
	if _, err := e.Create(t.Context(), engine.Spec{Snapshot: "snap-0000000000000000"}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("create from an unknown snapshot = %v", err)
	}
}

func TestEngineReadopt(t *testing.T) {
	dir := t.TempDir()
	e1, err := NewEngine(EngineOptions{DataDir: dir})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	live, err := e1.Create(t.Context(), engine.Spec{Name: "live", Ports: []int{7}})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := e1.Create(t.Context(), engine.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	e1.Close()
	e2, err := NewEngine(EngineOptions{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	defer e2.Terminate(context.Background(), live.ID)
	defer e2.Terminate(context.Background(), dead.ID)
	bx, _ := e2.lookup(dead.ID)
	if err := syscallKill(bx.st.Pid); err != nil {
		t.Fatal(err)
	}
	if err := waitGone(bx.st, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	list, err := e2.List(t.Context())
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	states := map[string]engine.State{list[0].ID: list[0].State, list[1].ID: list[1].State}
	if states[live.ID] != engine.StateRunning || states[dead.ID] != engine.StateDead {
		t.Errorf("states after restart = %v", states)
	}
	if out, _ := sh(t, e2, live.ID, "hostname"); out != live.ID+"\n" {
		t.Errorf("exec in the re-adopted sandbox = %q", out)
	}
	if _, err := e2.Create(t.Context(), engine.Spec{Name: "live"}); !errors.Is(err, engine.ErrNameTaken) {
		t.Errorf("create with a live sandbox's name = %v", err)
	}
	// The tunnel outlived the engine that made it: its init serves it.
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(live.Tunnels[0].HostPort)))
	if err != nil {
		t.Fatalf("the tunnel is gone with its engine: %v", err)
	}
	c.Close()
	if _, err := e2.Exec(t.Context(), dead.ID, engine.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("exec in a dead sandbox = %v", err)
	}
}

func TestEnginePauseAndLimits(t *testing.T) {
	e := newTestEngine(t)
	caps := e.Capabilities()
	info := createBox(t, e, engine.Spec{Limits: engine.Limits{MemoryBytes: 256 << 20, Pids: 64}})
	if !caps.Limits && (info.Applied != engine.Limits{}) {
		t.Errorf("limits applied %+v without the capability", info.Applied)
	}
	t.Logf("capabilities %+v, applied %+v", caps, info.Applied)
	// What Applied says is what the kernel holds.
	bx, _ := e.lookup(info.ID)
	var found int
	for _, g := range bx.st.Cgroups {
		for file, want := range map[string]string{"pids.max": "64", "memory.limit_in_bytes": "268435456", "memory.max": "268435456"} {
			if b, err := os.ReadFile(filepath.Join(g, file)); err == nil {
				found++
				if strings.TrimSpace(string(b)) != want {
					t.Errorf("%s/%s = %q, want %s", g, file, b, want)
				}
			}
		}
	}
	if info.Applied.Pids == 64 && info.Applied.MemoryBytes > 0 && found < 2 {
		t.Errorf("applied %+v but %d limit files found in %v", info.Applied, found, bx.st.Cgroups)
	}
	if !caps.Pause {
		if err := e.Pause(t.Context(), info.ID); !errors.Is(err, engine.ErrUnsupported) {
			t.Errorf("Pause without the capability = %v", err)
		}
		return
	}
	info = createBox(t, e, engine.Spec{})
	if _, err := e.StartDetached(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"bash", "-c", "while :; do date +%s%N > /tmp/tick.new && mv /tmp/tick.new /tmp/tick; sleep 0.01; done"}}); err != nil {
		t.Fatal(err)
	}
	tick := filepath.Join(info.Home, "..", "tmp", "tick")
	for i := 0; i < 500; i++ {
		if b, _ := os.ReadFile(tick); len(b) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.Pause(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Get(t.Context(), info.ID); got.State != engine.StatePaused {
		t.Errorf("state after pause = %s", got.State)
	}
	before, _ := os.ReadFile(tick)
	time.Sleep(100 * time.Millisecond)
	after, _ := os.ReadFile(tick)
	if len(before) == 0 || !bytes.Equal(before, after) {
		t.Errorf("the sandbox ran while paused: %q -> %q", before, after)
	}
	if err := e.Resume(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if out, code := sh(t, e, info.ID, "echo", "back"); code != 0 || out != "back\n" {
		t.Errorf("exec after resume = %q %d", out, code)
	}
}

func TestEngineUnisolated(t *testing.T) {
	e, err := NewEngine(EngineOptions{DataDir: t.TempDir(), Unisolated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if e.Capabilities().Isolated {
		t.Error("an unisolated engine says it is isolated")
	}
	info := createBox(t, e, engine.Spec{})
	if info.Isolated {
		t.Error("an unisolated sandbox says it is isolated")
	}
	if _, err := e.StartDetached(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	out, _ := sh(t, e, info.ID, "bash", "-c", "echo $HOME; pwd")
	if out != info.Home+"\n"+info.Home+"\n" {
		t.Errorf("HOME and cwd of an unisolated sandbox = %q, want %s", out, info.Home)
	}
	if err := e.Terminate(t.Context(), info.ID); err != nil {
		t.Fatal(err)
	}
	if pids := markedPIDs(info.ID); len(pids) > 0 {
		t.Errorf("processes %v of the unisolated sandbox remain", pids)
	}
}

func TestEngineSpecOptions(t *testing.T) {
	e := newTestEngine(t)
	t.Run("timeout ends the sandbox with 124", func(t *testing.T) {
		info := createBox(t, e, engine.Spec{Timeout: 300 * time.Millisecond})
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := e.Get(t.Context(), info.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got.State == engine.StateDead {
				if got.ExitCode == nil || *got.ExitCode != 124 {
					t.Errorf("exit code after the timeout = %v, want 124", got.ExitCode)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the sandbox outlived its timeout")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("network shares the host's", func(t *testing.T) {
		ln := hostListener(t)
		port := ln.Addr().(*net.TCPAddr).Port
		script := fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3", port)
		shared := createBox(t, e, engine.Spec{Network: true})
		if out, _ := sh(t, e, shared.ID, "bash", "-c", script); out != "host\n" {
			t.Errorf("a Network sandbox cannot reach the host's loopback: %q", out)
		}
		own := createBox(t, e, engine.Spec{})
		if out, code := sh(t, e, own.ID, "bash", "-c", script+" 2>/dev/null"); code == 0 {
			t.Errorf("a sandbox without Network reached the host's loopback: %q", out)
		}
		if out, _ := sh(t, e, own.ID, "bash", "-c", "ls /sys/class/net"); out != "lo\n" {
			t.Errorf("interfaces of a sandbox without Network = %q, want lo only", out)
		}
	})
	t.Run("cancel kills the command", func(t *testing.T) {
		info := createBox(t, e, engine.Spec{})
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		_, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"sleep", "100"}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("exec past its context = %v", err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			out, _ := sh(t, e, info.ID, "bash", "-c", "pgrep -x sleep || true")
			if strings.TrimSpace(out) == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sleep still runs after the cancel: %q", out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	t.Run("paths never leave the sandbox", func(t *testing.T) {
		info := createBox(t, e, engine.Spec{})
		sh(t, e, info.ID, "ln", "-s", "/", "/home/user/up")
		for _, p := range []string{"/../../../../etc/hostname", "/home/user/up/etc/hostname", "/home/user/up/../../../etc/hostname"} {
			if _, err := e.ReadFile(t.Context(), info.ID, p); err != nil {
				t.Errorf("read %s: %v", p, err)
			}
		}
		// A write through .. lands inside the sandbox, never on the host.
		if err := e.WriteFile(t.Context(), info.ID, "/../../../../tmp/escape-"+info.ID, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat("/tmp/escape-" + info.ID); err == nil {
			os.Remove("/tmp/escape-" + info.ID)
			t.Error("a write through .. reached the host")
		}
		if _, err := e.ReadFile(t.Context(), info.ID, "relative"); err == nil {
			t.Error("a relative path was accepted")
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	fw := &frameWriter{w: &buf}
	fw.write(frameStdout, []byte("hello"))
	fw.write(frameExit, []byte(`{"code":0}`))
	f.Add(buf.Bytes())
	f.Add([]byte{frameStdin, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReader(bytes.NewReader(data))
		var b []byte
		for range 100 {
			typ, p, err := readFrame(r, b)
			if err != nil {
				return
			}
			if len(p) > maxFrame {
				t.Fatalf("frame %c of %d bytes", typ, len(p))
			}
			b = p[:0]
		}
	})
}

func FuzzReadRequest(f *testing.F) {
	f.Add([]byte(`{"op":"exec","argv":["true"]}` + "\n"))
	f.Add([]byte("{\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := readRequest(bufio.NewReader(bytes.NewReader(data)))
		if err == nil && req.TimeoutMs < 0 && req.Op == "" {
			_ = req // any decoded request is only data; the server validates it
		}
	})
}

// hostAddr is a non-loopback address of this machine, or "" when it has none.
func hostAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

func TestEngineEgress(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	ip := hostAddr()
	if ip == "" {
		t.Skip("no non-loopback address")
	}
	e := newTestEngine(t)
	serve := func(addr string) string {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "outside %s", r.URL.Path)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		return ln.Addr().String()
	}
	outside := serve(net.JoinHostPort(ip, "0"))
	loopback := serve("127.0.0.1:0")
	// The host's own addresses are out of reach unless EgressHosts lists them.
	unlisted := createBox(t, e, engine.Spec{Egress: true})
	if out, code := sh(t, e, unlisted.ID, "curl", "-sS", "--max-time", "10", "http://"+outside+"/plain"); code == 0 && strings.Contains(out, "outside") {
		t.Errorf("the egress proxy reached the host's address %s: %q", ip, out)
	}
	info := createBox(t, e, engine.Spec{Egress: true, EgressHosts: []string{ip}, Ports: []int{4000}})
	out, code := sh(t, e, info.ID, "curl", "-sS", "--max-time", "10", "http://"+outside+"/plain")
	if code != 0 || out != "outside /plain" {
		t.Errorf("http through the egress proxy = %d %q", code, out)
	}
	out, code = sh(t, e, info.ID, "curl", "-sS", "--max-time", "10", "-p", "http://"+outside+"/tunnel")
	if code != 0 || out != "outside /tunnel" {
		t.Errorf("CONNECT through the egress proxy = %d %q", code, out)
	}
	// The host's loopback (its services, other sandboxes' tunnels) stays out of reach.
	out, code = sh(t, e, info.ID, "curl", "-sS", "--max-time", "10", "-x", "http://127.0.0.1:3128", "http://"+loopback+"/")
	if code == 0 && strings.Contains(out, "outside") {
		t.Errorf("the egress proxy reached the host's loopback: %q", out)
	}
	// Without Egress there is no way out.
	closed := createBox(t, e, engine.Spec{})
	if out, code := sh(t, e, closed.ID, "curl", "-sS", "--max-time", "5", "http://"+outside+"/"); code == 0 {
		t.Errorf("a sandbox without egress reached the outside: %q", out)
	}
}

func TestEngineExecTTY(t *testing.T) {
	e := newTestEngine(t)
	info := createBox(t, e, engine.Spec{})
	resize := make(chan engine.WindowSize, 1)
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close() // Exec's stdin copy ends with its reader
	var out testutil.Buffer
	done := make(chan error, 1)
	var code int
	go func() {
		var err error
		code, err = e.Exec(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"bash", "--norc", "-i"}, TTY: true,
			Size: engine.WindowSize{Cols: 100, Rows: 30}, Resize: resize, Stdin: stdinR, Stdout: &out, Env: []string{"PS1=$ "}})
		done <- err
	}()
	wait := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the terminal output %q", want, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	fmt.Fprintln(stdinW, "tty; stty size")
	wait("30 100")
	if !strings.Contains(out.String(), "/dev/pts/") {
		t.Errorf("the command has no terminal: %q", out.String())
	}
	resize <- engine.WindowSize{Cols: 120, Rows: 40}
	time.Sleep(50 * time.Millisecond)
	fmt.Fprintln(stdinW, "stty size")
	wait("40 120")
	fmt.Fprintln(stdinW, "exit 5")
	if err := <-done; err != nil || code != 5 {
		t.Errorf("exit of the terminal command = %d, %v", code, err)
	}
}

// hostListener listens on the host's loopback and answers every connection "host";
// it closes with the test.
func hostListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("host\n"))
			c.Close()
		}
	}()
	return ln
}
