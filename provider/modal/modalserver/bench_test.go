package modalserver

import (
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"
)

// BenchmarkExecRoundTrip is one `true` through the SDK: exec start, stdout read to
// EOF and wait, over real gRPC to the server and into the isolated local engine's
// sandbox (created once, so namespace setup is not in the loop).
func BenchmarkExecRoundTrip(b *testing.B) {
	eng := bootEngine(b)
	url, _ := startServer(b, eng)
	sdkEnv(b, url, true)
	c := newSDK(b)
	ctx := context.Background()
	app, err := c.Apps.FromName(ctx, "bench", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		b.Fatal(err)
	}
	sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Terminate(ctx, nil)
	b.ResetTimer()
	for b.Loop() {
		p, err := sb.Exec(ctx, []string{"true"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if code, err := p.Wait(ctx, nil); err != nil || code != 0 {
			b.Fatalf("wait = %d, %v", code, err)
		}
	}
}

// BenchmarkExecOutputClientLeft: a client reads 256 MiB of an exec printing 1.5 GB,
// then goes away. Reported: what the server then holds for the exec (its window) and
// the process's Go heap in use, after a GC.
func BenchmarkExecOutputClientLeft(b *testing.B) {
	eng := bootEngine(b)
	url, srv := startServer(b, eng)
	sdkEnv(b, url, true)
	c := newSDK(b)
	ctx := context.Background()
	app, err := c.Apps.FromName(ctx, "bench", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		sb, err := c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil), nil)
		if err != nil {
			b.Fatal(err)
		}
		readCtx, cancel := context.WithCancel(ctx)
		p, err := sb.Exec(readCtx, []string{"head", "-c", "1500000000", "/dev/zero"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyN(io.Discard, p.Stdout, 256<<20); err != nil || n != 256<<20 {
			b.Fatalf("read %d: %v", n, err)
		}
		cancel()
		p.Stdout.Close()
		p.Stderr.Close()
		time.Sleep(time.Second)
		rec, _ := srv.lookup(ctx, sb.SandboxID)
		held := 0
		rec.execMu.Lock()
		for _, ps := range rec.execs {
			held += ps.stdout.held() + ps.stderr.held()
		}
		rec.execMu.Unlock()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(held)/(1<<20), "held-MiB")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-inuse-MiB")
		sb.Terminate(ctx, nil)
	}
}
