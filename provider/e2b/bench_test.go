package e2b_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// The benchmarks run against the local server on the local engine (loopback only):
// they measure this code and the engine, not E2B's cloud.

func benchClient(b *testing.B) *e2b.Client {
	srv := e2btest.Start(b, e2btest.Options{SandboxMCP: sandboxMCP})
	return srv.Client(b)
}

// BenchmarkCreateHealthy: provider create (fresh sandbox, scratch workspace, boot plan
// through envd) until sandbox-mcp answers through its tunnel, then terminate; on the
// engine's default root and on the test image (imagetest.PlanImage: Caddy and sshd
// start too).
func BenchmarkCreateHealthy(b *testing.B) {
	for _, img := range []bool{false, true} {
		name := "root"
		if img {
			name = "image"
		}
		b.Run(name, func(b *testing.B) {
			srv := e2btest.Start(b, e2btest.Options{SandboxMCP: sandboxMCP, Image: img})
			p, err := newProvider(providerOptions{Client: srv.ClientOptions(), Template: "base", LocalTunnels: true})
			if err != nil {
				b.Fatal(err)
			}
			opts := provider.CreateOptions{SessionID: "bench", EnvVars: map[string]string{provider.EnvSandboxMCPAuthToken: "t"}}
			for b.Loop() {
				res, err := p.CreateSandbox(context.Background(), opts)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := p.Terminate(context.Background(), "bench", res.SandboxID); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// BenchmarkDialPort: one line there and back through a connection of the engine's
// DialPort (the envd bridge) to an echo server in the sandbox; "dial" includes opening
// the connection, "reuse" keeps one open.
func BenchmarkDialPort(b *testing.B) {
	srv := e2btest.Start(b, e2btest.Options{SandboxMCP: sandboxMCP})
	eng, err := e2b.NewEngine(srv.Client(b), e2b.EngineOptions{Template: "base", Timeout: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	in, err := eng.Create(ctx, engine.Spec{})
	if err != nil {
		b.Fatal(err)
	}
	if code, err := eng.Exec(ctx, in.ID, engine.ExecRequest{Argv: []string{"sh", "-c", echoServer}}); err != nil || code != 0 {
		b.Fatalf("start the echo server = %d, %v", code, err)
	}
	dial := func() net.Conn {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			c, err := eng.DialPort(ctx, in.ID, 8001)
			if err == nil {
				return c
			}
			if time.Now().After(deadline) {
				b.Fatal(err)
			}
		}
	}
	echo := func(c net.Conn, r *bufio.Reader) {
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			b.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err != nil || line != "PING\n" {
			b.Fatal(line, err)
		}
	}
	b.Run("dial", func(b *testing.B) {
		for b.Loop() {
			c := dial()
			echo(c, bufio.NewReader(c))
			c.Close()
		}
	})
	b.Run("reuse", func(b *testing.B) {
		c := dial()
		defer c.Close()
		r := bufio.NewReader(c)
		for b.Loop() {
			echo(c, r)
		}
	})
}

// BenchmarkCommandRoundTrip: one `true` through process.Start until its end event.
func BenchmarkCommandRoundTrip(b *testing.B) {
	c := benchClient(b)
	sb, err := c.Create(context.Background(), e2bwire.NewSandbox{TemplateID: "base", Timeout: 600})
	if err != nil {
		b.Fatal(err)
	}
	e := c.Envd(sb)
	for b.Loop() {
		r, err := e.Run(context.Background(), "true", e2b.RunOptions{})
		if err != nil || r.ExitCode != 0 {
			b.Fatal(r, err)
		}
	}
}

// BenchmarkUpload: an 8 MiB file through POST /files.
func BenchmarkUpload(b *testing.B) {
	c := benchClient(b)
	sb, err := c.Create(context.Background(), e2bwire.NewSandbox{TemplateID: "base", Timeout: 600})
	if err != nil {
		b.Fatal(err)
	}
	e := c.Envd(sb)
	data := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := e.WriteFile(context.Background(), "/home/user/upload.bin", data); err != nil {
			b.Fatal(err)
		}
	}
}
