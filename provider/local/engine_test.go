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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	// Only the sandbox's own processes: init and ps itself.
	out, _ = sh(t, e, info.ID, "ps", "-e", "-o", "pid=,comm=")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(strings.TrimSpace(lines[0]), "1 ") {
		t.Errorf("ps inside shows %q, want only init and ps", out)
	}
	for _, d := range []string{"/home/user/workspace", "/home/user/.proliferate", "/tmp/proliferate"} {
		if fi, err := e.Stat(t.Context(), info.ID, d); err != nil || !fi.IsDir {
			t.Errorf("stat %s = %+v, %v", d, fi, err)
		}
	}
	if _, code := sh(t, e, info.ID, "test", "-x", SandboxMCPPath); code != 0 {
		t.Errorf("%s is not executable inside", SandboxMCPPath)
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
	_ = io.Discard
}
