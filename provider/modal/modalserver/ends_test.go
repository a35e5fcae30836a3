package modalserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestSandboxCommand drives a sandbox's own command through the SDK (V1 and V2): its
// stdin, stdout and stderr, its exit code, and how wait() reads the ends a user sees —
// terminated is 137, timed out is 124, whichever came first — and that an ended
// sandbox is removed from the engine.
func TestSandboxCommand(t *testing.T) {
	for _, v2 := range []bool{true, false} {
		t.Run(fmt.Sprintf("v2=%v", v2), func(t *testing.T) {
			eng := bootEngine(t)
			url, srv := startServer(t, eng)
			sdkEnv(t, url, v2)
			testSandboxCommand(t, newSDK(t), srv, eng.Engine)
		})
	}
}

func testSandboxCommand(t *testing.T, c *modal.Client, srv *Server, eng *local.Engine) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "cmd", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("debian:bookworm-slim", nil)
	create := func(p *modal.SandboxCreateParams) *modal.Sandbox {
		t.Helper()
		sb, err := c.Sandboxes.Create(ctx, app, img, p)
		if err != nil {
			t.Fatalf("Create %+v: %v", p, err)
		}
		return sb
	}
	gone := func(sb *modal.Sandbox) {
		t.Helper()
		srv.mu.Lock()
		eid := srv.sandboxes[sb.SandboxID].engineID
		srv.mu.Unlock()
		// Removed right after the result is recorded (which is what Wait sees).
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := eng.Get(ctx, eid)
			if errors.Is(err, engine.ErrNotFound) {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("ended sandbox %s is still in the engine: %v", sb.SandboxID, err)
				return
			}
		}
	}

	sb := create(&modal.SandboxCreateParams{Command: []string{"sh", "-c", "echo out; echo err >&2; read x; echo got $x; exit 3"}})
	if _, err := io.WriteString(sb.Stdin, "hi\n"); err != nil {
		t.Fatalf("stdin: %v", err)
	}
	sb.Stdin.Close()
	out, err := io.ReadAll(sb.Stdout)
	if err != nil || string(out) != "out\ngot hi\n" {
		t.Errorf("sandbox stdout = %q, %v; want %q", out, err, "out\ngot hi\n")
	}
	if errOut, err := io.ReadAll(sb.Stderr); err != nil || string(errOut) != "err\n" {
		t.Errorf("sandbox stderr = %q, %v", errOut, err)
	}
	if code, err := sb.Wait(ctx, nil); err != nil || code != 3 {
		t.Errorf("Wait after exit 3 = %d, %v", code, err)
	}
	gone(sb)

	sb = create(&modal.SandboxCreateParams{Command: []string{"sleep", "600"}})
	if _, err := sb.Terminate(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if code, err := sb.Wait(ctx, nil); err != nil || code != 137 {
		t.Errorf("Wait after Terminate = %d, %v; want 137", code, err)
	}
	gone(sb)

	for _, cmd := range [][]string{{"sleep", "600"}, nil} {
		sb = create(&modal.SandboxCreateParams{Command: cmd, Timeout: 2 * time.Second})
		if code, err := sb.Wait(ctx, nil); err != nil || code != 124 {
			t.Errorf("Wait on a sandbox (command %q) past its timeout = %d, %v; want 124", cmd, code, err)
		}
		gone(sb)
	}

	sb = create(nil)
	defer sb.Terminate(ctx, nil)
	p, err := sb.Exec(ctx, []string{"sh", "-c", "tty; echo to-stderr >&2"}, &modal.SandboxExecParams{PTY: true})
	if err != nil {
		t.Fatal(err)
	}
	out, _ = io.ReadAll(p.Stdout)
	if code, err := p.Wait(ctx, nil); err != nil || code != 0 || !strings.HasPrefix(string(out), "/dev/pts/") || !strings.Contains(string(out), "to-stderr") {
		t.Errorf("exec with PTY = %d, %v, %q; want a /dev/pts terminal with stderr on it", code, err, out)
	}
	p, err = sb.Exec(ctx, []string{"sh", "-c", "tty"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	out, _ = io.ReadAll(p.Stdout)
	if code, _ := p.Wait(ctx, nil); code == 0 || strings.HasPrefix(string(out), "/dev/pts/") {
		t.Errorf("exec without PTY = %d %q; want no terminal", code, out)
	}
}

// TestExecOutputBounded: an exec printing far more than the window while nobody reads
// holds at most the window in the server; read afterwards, every byte arrives.
func TestExecOutputBounded(t *testing.T) {
	eng := bootEngine(t)
	url, srv := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "big", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx, nil)
	const size = 8 * execWindow
	p, err := sb.Exec(ctx, []string{"head", "-c", fmt.Sprint(size), "/dev/zero"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := srv.lookup(ctx, sb.SandboxID)
	held := func() (n int) {
		rec.execMu.Lock()
		defer rec.execMu.Unlock()
		for _, ps := range rec.execs {
			n += ps.stdout.held()
		}
		return n
	}
	deadline := time.Now().Add(30 * time.Second)
	for held() < execWindow && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the writer would go on here if it were unbounded
	if n := held(); n != execWindow {
		t.Errorf("server holds %d bytes of an unread %d-byte output; want the %d-byte window", n, size, execWindow)
	}
	n, err := io.Copy(io.Discard, p.Stdout)
	if err != nil || n != size {
		t.Errorf("read %d bytes, %v; want %d", n, err, size)
	}
	if code, err := p.Wait(ctx, nil); err != nil || code != 0 {
		t.Errorf("Wait = %d, %v", code, err)
	}
}

// TestReadinessProbe: WaitUntilReady waits for the sandbox's probe (an exec that
// must exit 0, or a TCP port that must accept) and times out while it fails; a
// sandbox without a probe is refused.
func TestReadinessProbe(t *testing.T) {
	eng := bootEngine(t)
	url, srv := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "probe", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("debian:bookworm-slim", nil)
	execProbe, err := modal.NewExecProbe([]string{"test", "-e", "/tmp/ready"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{ReadinessProbe: execProbe})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx, nil)
	if err := sb.WaitUntilReady(ctx, 500*time.Millisecond, nil); err == nil {
		t.Errorf("WaitUntilReady passed before the probe could")
	}
	if _, _, code := execOut(t, ctx, sb, []string{"touch", "/tmp/ready"}, nil); code != 0 {
		t.Fatal("touch failed")
	}
	if err := sb.WaitUntilReady(ctx, 10*time.Second, nil); err != nil {
		t.Errorf("WaitUntilReady once the exec probe passes: %v", err)
	}

	tcpProbe, err := modal.NewTCPProbe(tunnelPort, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb2, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{ReadinessProbe: tcpProbe})
	if err != nil {
		t.Fatal(err)
	}
	defer sb2.Terminate(ctx, nil)
	if err := sb2.WaitUntilReady(ctx, 500*time.Millisecond, nil); err == nil {
		t.Errorf("WaitUntilReady passed with nothing listening")
	}
	rec, _ := srv.lookup(ctx, sb2.SandboxID)
	srv.mu.Lock()
	eid := rec.engineID
	srv.mu.Unlock()
	modaltest.ServeHTTP(t, eng.Engine, eid, tunnelPort, "up")
	if err := sb2.WaitUntilReady(ctx, 10*time.Second, nil); err != nil {
		t.Errorf("WaitUntilReady once the port listens: %v", err)
	}

	plain, err := c.Sandboxes.Create(ctx, app, img, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Terminate(ctx, nil)
	if err := plain.WaitUntilReady(ctx, time.Second, nil); err == nil || !strings.Contains(err.Error(), "no readiness probe") {
		t.Errorf("WaitUntilReady without a probe = %v, want refused", err)
	}
}

// TestFinishedRecordsBounded: the server remembers a bounded number of ended sandboxes
// (the oldest-ended goes first), so a long-running server does not grow with every
// sandbox it ever ran.
func TestFinishedRecordsBounded(t *testing.T) {
	eng := bootEngine(t)
	url, srv := startServer(t, eng)
	srv.mu.Lock()
	srv.maxFinished = 2
	srv.mu.Unlock()
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx := t.Context()
	app, err := c.Apps.FromName(ctx, "bounded", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 3 {
		sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sb.Terminate(ctx, nil); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.SandboxID)
	}
	if _, err := srv.lookup(ctx, ids[0]); err == nil {
		t.Errorf("the oldest ended sandbox %s is still remembered past the bound", ids[0])
	}
	for _, id := range ids[1:] {
		if _, err := srv.lookup(ctx, id); err != nil {
			t.Errorf("ended sandbox %s within the bound: %v", id, err)
		}
	}
}

// TestWriteTooLarge: an upload past maxWriteFile is refused (FileTooLarge), not held whole.
func TestWriteTooLarge(t *testing.T) {
	eng := bootEngine(t)
	url, _ := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "big", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx, nil)
	err = sb.Filesystem.WriteBytes(ctx, make([]byte, maxWriteFile+1), "/tmp/big", nil)
	// The SDK maps the FileTooLarge kind to its own type for reads only; for a write it
	// is a SandboxFilesystemError with the server's message.
	if err == nil || !strings.Contains(err.Error(), "too large to write") {
		t.Errorf("WriteBytes of %d bytes = %T %v, want the server's too-large refusal", maxWriteFile+1, err, err)
	}
}
