package e2b_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// The benchmarks run against the local server on the local engine (loopback only):
// they measure this code and the engine, not E2B's cloud.

func benchClient(b *testing.B) *e2b.Client {
	srv := e2btest.Start(b, e2btest.Options{SandboxMCP: sandboxMCP})
	return srv.Client(b)
}

// BenchmarkCreateHealthy: provider create (fresh sandbox, scratch workspace, boot plan
// through envd) until sandbox-mcp answers through its tunnel, then terminate.
func BenchmarkCreateHealthy(b *testing.B) {
	srv := e2btest.Start(b, e2btest.Options{SandboxMCP: sandboxMCP})
	p, err := e2b.New(e2b.Options{Client: srv.ClientOptions(),
		Template: "base", LocalTunnels: true, Getenv: env(map[string]string{})})
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
