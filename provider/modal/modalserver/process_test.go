package modalserver

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// processServer is a server over a test engine, for tests of its processes; it
// closes when the test ends.
func processServer(t *testing.T) *Server {
	t.Helper()
	srv, err := New(Options{Engine: modaltest.Engine(t, local.EngineOptions{}), Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestStdinBounded: writes to a program that never reads its stdin queue at most
// stdinMaxQueued bytes (plus the pipe's buffer); the next write waits, and gives up
// with its caller's context.
func TestStdinBounded(t *testing.T) {
	t.Parallel()
	srv := processServer(t)
	sb := newSandbox(&sandbox{id: "sb-test"})
	p, err := srv.start(sb, "e1", func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error) {
		<-ctx.Done() // never reads stdin
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	chunk := make([]byte, 1<<20)
	var off uint64
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		err := p.stdinWrite(ctx, off, chunk, false)
		cancel()
		if err != nil {
			if status.Code(err) != codes.DeadlineExceeded {
				t.Fatalf("write %d = %v, want DeadlineExceeded once the queue is full", i, err)
			}
			break
		}
		off += uint64(len(chunk))
		if i > 64 {
			t.Fatalf("%d MiB queued for a program that reads nothing", i)
		}
	}
	if q := p.stdinQueued.Load(); q > stdinMaxQueued {
		t.Errorf("%d bytes queued, want at most %d", q, stdinMaxQueued)
	}
}

// TestStdinReadEndsWithExec: a process reading its stdin whole, from a client that
// never sends EOF, returns once it is killed (Server.Close waits for it).
func TestStdinReadEndsWithExec(t *testing.T) {
	t.Parallel()
	srv := processServer(t)
	sb := newSandbox(&sandbox{id: "sb-test"})
	read := make(chan error, 1)
	p, err := srv.start(sb, "e1", func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error) {
		_, err := io.ReadAll(stdin)
		read <- err
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.stdinWrite(t.Context(), 0, []byte("partial"), false); err != nil {
		t.Fatal(err)
	}
	p.kill()
	select {
	case err := <-read:
		if err == nil {
			t.Error("io.ReadAll(stdin) of a killed process = nil, want the read cut off")
		}
	case <-time.After(10 * time.Second):
		_ = p.stdinWrite(t.Context(), 7, nil, true) // EOF, so that srv.Close can return
		t.Fatal("io.ReadAll(stdin) still blocked 10 s after the process was killed")
	}
}

// TestExecsBounded: one sandbox holds at most maxExecs exec records; the next start
// is ResourceExhausted, and a forgotten record makes room.
func TestExecsBounded(t *testing.T) {
	t.Parallel()
	srv := processServer(t)
	sb := newSandbox(&sandbox{id: "sb-test"})
	wait := func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error) {
		<-ctx.Done()
		return 0, nil
	}
	var first *process
	for i := range maxExecs {
		p, err := srv.start(sb, fmt.Sprint("e", i), wait)
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if first == nil {
			first = p
		}
	}
	if _, err := srv.start(sb, "one-more", wait); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("start past %d execs = %v, want ResourceExhausted", maxExecs, err)
	}
	first.forget()
	if _, err := srv.start(sb, "one-more", wait); err != nil {
		t.Errorf("start after a record was forgotten: %v", err)
	}
	sb.cancelExecs()
}
