package e2b_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// echoServer answers each line of every connection with the line upper-cased, until
// the client closes; started detached.
const echoServer = `nohup perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1", ` +
	`LocalPort => 8001, Listen => 5, ReuseAddr => 1) or die; while ($c = $s->accept) { $c->autoflush(1); ` +
	`while (<$c>) { print $c uc } close $c }' </dev/null >/dev/null 2>&1 &`

// TestDialPortBridge: a connection through envd's bridge carries several exchanges
// both ways (one of 100 kB), honours read deadlines, and closing it ends the bridge
// process in the sandbox. (The contract suite's DialPort test reads a server that
// closes.)
func TestDialPortBridge(t *testing.T) {
	t.Parallel()
	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP})
	c := srv.Client(t)
	eng, err := e2b.NewEngine(c, e2b.EngineOptions{Template: "base", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	in, err := eng.Create(ctx, engine.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.Terminate(context.Background(), in.ID) })
	if code, err := eng.Exec(ctx, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", echoServer}}); err != nil || code != 0 {
		t.Fatalf("start the echo server = %d, %v", code, err)
	}
	var conn net.Conn
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if conn, err = eng.DialPort(ctx, in.ID, 8001); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("DialPort: %v", err)
	}
	r := bufio.NewReader(conn)
	for _, line := range []string{"one\n", "two words\n", strings.Repeat("x", 100000) + "\n"} {
		if _, err := io.WriteString(conn, line); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		got, err := r.ReadString('\n')
		if err != nil || got != strings.ToUpper(line) {
			t.Fatalf("echo of %d bytes = %d bytes %.20q, %v", len(line), len(got), got, err)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.ReadByte(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline = %v, want os.ErrDeadlineExceeded", err)
	}
	sb, err := c.Connect(ctx, in.ID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ev := c.Envd(sb)
	bridges := func() int {
		t.Helper()
		list, err := ev.ListProcesses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range list {
			if strings.Contains(strings.Join(p.Config.Args, " "), "/dev/tcp") {
				n++
			}
		}
		return n
	}
	if n := bridges(); n != 1 {
		t.Errorf("bridge processes while connected = %d, want 1", n)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(15 * time.Second); bridges() > 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bridge processes still run after the connection closed", bridges())
		}
	}
}
