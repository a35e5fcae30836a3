package proliferate

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// sandboxMCPBin is cmd/sandbox-mcp, built by the first end-to-end test into
// dir, which TestMain removes.
var sandboxMCPBin struct {
	once sync.Once
	dir  string
	err  error
}

// sandboxMCP returns the path of the sandbox-mcp binary, building it once
// for all tests of the run.
func sandboxMCP(t *testing.T) string {
	t.Helper()
	b := &sandboxMCPBin
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "proliferate-test-"); b.err == nil {
			b.err = testutil.BuildCommands(b.dir, "sandbox-mcp")
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return filepath.Join(b.dir, "sandbox-mcp")
}

// realSidecar starts a real `sandbox-mcp api` and returns the CLI's environment for it.
func realSidecar(t *testing.T) (*sidecartest.Sidecar, map[string]string) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test builds and runs sandbox-mcp; skipped with -short")
	}
	sc := sidecartest.Start(t, sandboxMCP(t))
	env := map[string]string{}
	for _, kv := range sc.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return sc, env
}

func TestServicesScenarioRealSidecar(t *testing.T) {
	_, env := realSidecar(t)
	servicesScenario(t, env)
}

// TestWaitRealSidecar: --wait returns once the readiness probe passes, and
// fails with exit 1 and the service's last log lines when it exits instead.
func TestWaitRealSidecar(t *testing.T) {
	_, env := realSidecar(t)
	ctx := t.Context()
	port := testutil.FreePort(t)

	cmd := fmt.Sprintf("sleep 1; exec python3 -m http.server %d --bind 127.0.0.1", port)
	r := cli(t, ctx, env, nil, "services", "start", "--name", "web", "--command", cmd, "--ready-tcp", fmt.Sprint(port), "--wait")
	if r.code != 0 {
		t.Fatalf("start --wait = %d, stderr %q", r.code, r.stderr)
	}
	if m := decodeLine(t, r.stdout); m["service"].(map[string]any)["ready"] != true {
		t.Errorf("start --wait printed %v, want ready true", m)
	}
	if conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Errorf("after --wait, port %d refuses connections: %v", port, err)
	} else {
		conn.Close()
	}
	if r := cli(t, ctx, env, nil, "services", "wait", "--name", "web"); r.code != 0 {
		t.Errorf("services wait on a ready service = %d, stderr %q", r.code, r.stderr)
	}

	r = cli(t, ctx, env, nil, "services", "start", "--name", "bad", "--command", "echo boom-before-exit; exit 3", "--ready-tcp", fmt.Sprint(port+1), "--wait")
	if r.code != 1 {
		t.Fatalf("start --wait of a failing service = %d, want 1; stderr %q", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "boom-before-exit") {
		t.Errorf("stderr = %q, want the service's last log lines", r.stderr)
	}
}

// TestWaitHonestRealSidecar: without a probe, --wait waits for the settle
// period and fails on a command that dies meanwhile; a port held by another
// process never makes a service ready; when --wait-timeout runs out the
// message says whether the service was left running or stopped.
func TestWaitHonestRealSidecar(t *testing.T) {
	_, env := realSidecar(t)
	ctx := t.Context()

	r := cli(t, ctx, env, nil, "services", "start", "--name", "dies", "--command", "sleep 0.3; no-such-command-xyz", "--wait")
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("start --wait of a command that exits after 0.3 s = %d, stdout %q; want 1 and nothing", r.code, r.stdout)
	}
	for _, want := range []string{"no-such-command-xyz: command not found", `Error: Service "dies" exited with code 127 before it had run for 1s`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr = %q, want it to contain %q", r.stderr, want)
		}
	}

	r = cli(t, ctx, env, nil, "services", "start", "--name", "lives", "--command", "sleep 60", "--wait", "--settle", "500ms")
	if r.code != 0 || decodeLine(t, r.stdout)["service"].(map[string]any)["status"] != "running" {
		t.Errorf("start --wait of a command that keeps running = %d %q %q, want 0 and running", r.code, r.stdout, r.stderr)
	}

	// Another process holds the port: never ready; the reason names it.
	holder, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	port := holder.Addr().(*net.TCPAddr).Port
	r = cli(t, ctx, env, nil, "services", "start", "--name", "squatted", "--command", "sleep 60",
		"--ready-tcp", fmt.Sprint(port), "--ready-timeout", "1s", "--wait")
	want := fmt.Sprintf("not ready after 1000 ms: port %d is held by pid %d", port, os.Getpid())
	if r.code != 1 || !strings.Contains(r.stderr, want) {
		t.Errorf("start --wait with the port held by another process = %d %q, want 1 and %q", r.code, r.stderr, want)
	}

	// --wait-timeout: left running, or stopped with --stop-on-timeout.
	for _, stop := range []bool{false, true} {
		args := []string{"services", "start", "--name", "slow", "--command", "sleep 60", "--ready-log", "never printed", "--wait", "--wait-timeout", "500ms"}
		wantMsg, wantStatus := `Error: Service "slow" not ready after 500ms; it was left running (stop it with `+"`proliferate services stop --name slow`"+` or pass --stop-on-timeout)`, "running"
		if stop {
			args = append(args, "--stop-on-timeout")
			wantMsg, wantStatus = `Error: Service "slow" not ready after 500ms; it was stopped (--stop-on-timeout)`, "stopped"
		}
		r = cli(t, ctx, env, nil, args...)
		if r.code != 1 || !strings.Contains(r.stderr, wantMsg) {
			t.Errorf("start --wait past --wait-timeout (stop %v) = %d %q, want 1 and %q", stop, r.code, r.stderr, wantMsg)
		}
		l := cli(t, ctx, env, nil, "services", "list")
		var list apitype.ServicesResponse
		if err := json.Unmarshal([]byte(l.stdout), &list); err != nil {
			t.Fatalf("list: %v %q", err, l.stdout)
		}
		for _, s := range list.Services {
			if s.Name == "slow" && s.Status != wantStatus {
				t.Errorf("after the wait timed out (stop %v): status %q, want %q", stop, s.Status, wantStatus)
			}
		}
	}
	for _, n := range []string{"lives", "squatted", "slow"} {
		cli(t, ctx, env, nil, "services", "stop", "--name", n)
	}
}

// TestLogsSplitCharacterRealSidecar: a service writes half of "€", then the
// rest 5 s later; `logs --follow` shows the character whole, and every frame
// it printed is valid UTF-8 (no U+FFFD: nothing was released on a timer).
func TestLogsSplitCharacterRealSidecar(t *testing.T) {
	_, env := realSidecar(t)
	r := cli(t, t.Context(), env, nil, "services", "start", "--name", "euro",
		"--command", `printf 'price: \xe2\x82'; sleep 5; printf '\xac 5\n'; sleep 60`)
	if r.code != 0 {
		t.Fatalf("start = %d %q", r.code, r.stderr)
	}
	defer cli(t, context.Background(), env, nil, "services", "stop", "--name", "euro")
	ctx, cancel := context.WithTimeout(t.Context(), 9*time.Second)
	defer cancel()
	r = cli(t, ctx, env, nil, "services", "logs", "--name", "euro", "--follow")
	var text strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var fr apitype.LogFrame
		if err := json.Unmarshal([]byte(line), &fr); err != nil {
			t.Fatalf("frame %q: %v", line, err)
		}
		if !utf8.ValidString(fr.Content) || strings.ContainsRune(fr.Content, utf8.RuneError) {
			t.Errorf("frame %q splits a character", fr.Content)
		}
		text.WriteString(fr.Content)
	}
	if !strings.Contains(text.String(), "price: € 5\n") {
		t.Errorf("followed log = %q, want it to contain %q", text.String(), "price: € 5\n")
	}
}
