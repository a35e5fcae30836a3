package modalserver

import (
	"context"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// process is one exec: a command in the engine, or the filesystem tool the server
// runs itself.
type process struct {
	stdout, stderr *output

	stdinMu      sync.Mutex
	stdinW       *os.File // nil once closed
	stdinWritten uint64
	stdinQueue   chan []byte
	// stdinQueued is the bytes in stdinQueue; a write that would take it past
	// stdinMaxQueued waits until the program reads (stdinDrained).
	stdinQueued  atomic.Int64
	stdinDrained chan struct{}

	cancel context.CancelFunc
	done   chan struct{}
	code   int32
	err    error

	// forget drops the exec's record (and its kept output) from its sandbox.
	forget   func()
	seenMu   sync.Mutex
	seen     int // stdout EOF, stderr EOF and a wait answered: 3 means forget
	seenOnce [3]bool
}

// execRetention is how long a finished exec's output stays for a reader that has not
// taken it all: the record goes when stdout and stderr were read to the end and the
// exit code was answered, or this long after the exec ended.
const execRetention = 2 * time.Minute

// delivered records one of the three things a client takes from an exec (0 stdout
// EOF, 1 stderr EOF, 2 the exit code); with all three the record is dropped.
func (p *process) delivered(what int) {
	p.seenMu.Lock()
	if !p.seenOnce[what] {
		p.seenOnce[what] = true
		p.seen++
	}
	all := p.seen == 3
	p.seenMu.Unlock()
	if all {
		p.forget()
	}
}

// stdinWrite appends data at offset; bytes before the written count are ones the
// client resent after a reconnect. It waits (until ctx ends) while stdinMaxQueued bytes
// wait for the program to read them.
func (p *process) stdinWrite(ctx context.Context, offset uint64, data []byte, eof bool) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if offset > p.stdinWritten {
		return status.Errorf(codes.InvalidArgument, "stdin offset %d is past the %d bytes written", offset, p.stdinWritten)
	}
	if skip := p.stdinWritten - offset; skip < uint64(len(data)) {
		if p.stdinQueue == nil {
			if len(data) > 0 {
				return status.Error(codes.FailedPrecondition, "stdin is closed")
			}
		} else if err := p.enqueueStdin(ctx, append([]byte(nil), data[skip:]...)); err != nil {
			return err
		}
	}
	if eof && p.stdinQueue != nil {
		close(p.stdinQueue)
		p.stdinQueue = nil
	}
	return nil
}

// enqueueStdin queues chunk for the program; p.stdinMu is held.
func (p *process) enqueueStdin(ctx context.Context, chunk []byte) error {
	// What Modal answers when the program is gone; the SDKs' file writes take it as
	// "exited early".
	exited := status.Error(codes.FailedPrecondition, "the process has exited")
	for q := p.stdinQueued.Load(); q > 0 && q+int64(len(chunk)) > stdinMaxQueued; q = p.stdinQueued.Load() {
		select {
		case <-p.stdinDrained:
		case <-p.done:
			return exited
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	p.stdinQueued.Add(int64(len(chunk)))
	select {
	case p.stdinQueue <- chunk:
	case <-p.done:
		return exited
	case <-ctx.Done():
		p.stdinQueued.Add(-int64(len(chunk)))
		return status.FromContextError(ctx.Err()).Err()
	}
	p.stdinWritten += uint64(len(chunk))
	return nil
}

// kill cancels the process (and lets its output writers go).
func (p *process) kill() {
	p.stdinMu.Lock()
	c := p.cancel
	p.stdinMu.Unlock()
	c()
}

func (p *process) stdinStatus() (uint64, bool) {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	return p.stdinWritten, p.stdinQueue == nil
}

// Stdin bounds: chunks and bytes queued for a program that has not read them.
const (
	stdinQueueDepth = 1024
	stdinMaxQueued  = 8 << 20
)

// procFunc is what a process runs; it gets stdin as a reader.
type procFunc func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error)

// newProcess is a process that writes to stdout and stderr.
func newProcess(stdout, stderr *output) *process {
	p := &process{stdout: stdout, stderr: stderr, stdinQueue: make(chan []byte, stdinQueueDepth),
		stdinDrained: make(chan struct{}, 1), done: make(chan struct{}), forget: func() {}}
	p.cancel = func() {}
	return p
}

// maxExecs bounds the exec records of one sandbox (each holds up to two output
// windows and a stdin queue).
const maxExecs = 256

// start runs fn as exec execID of sb.
func (s *Server) start(sb *sandbox, execID string, fn procFunc) (*process, error) {
	p := newProcess(newOutput(execWindow, false), newOutput(execWindow, false))
	sb.execMu.Lock()
	if sb.execs == nil {
		sb.execMu.Unlock()
		return nil, status.Error(codes.FailedPrecondition, "Sandbox has already finished")
	}
	if _, dup := sb.execs[execID]; dup {
		sb.execMu.Unlock()
		return nil, status.Errorf(codes.AlreadyExists, "exec %s already exists", execID)
	}
	if len(sb.execs) >= maxExecs {
		sb.execMu.Unlock()
		return nil, status.Errorf(codes.ResourceExhausted, "local Modal server: %d execs of this sandbox are running or have output nobody read", maxExecs)
	}
	sb.execs[execID] = p
	sb.execMu.Unlock()
	p.forget = func() {
		sb.execMu.Lock()
		if sb.execs[execID] == p {
			delete(sb.execs, execID)
		}
		sb.execMu.Unlock()
		// Nobody can read it any more: a process still printing does not wait.
		p.stdout.drop()
		p.stderr.drop()
	}
	if err := s.run(p, fn); err != nil {
		p.forget()
		return nil, err
	}
	return p, nil
}

// run starts fn under the server's context with p's stdio. The process's record is
// forgotten execRetention after it ended.
func (s *Server) run(p *process, fn procFunc) error {
	r, w, err := os.Pipe()
	if err != nil {
		return status.Errorf(codes.Internal, "stdin pipe: %v", err)
	}
	ctx, cancelCtx := context.WithCancel(s.ctx())
	// A process being killed must not wait for a reader to take its output.
	cancel := func() {
		cancelCtx()
		p.stdout.drop()
		p.stderr.drop()
	}
	p.stdinMu.Lock()
	p.stdinW, p.cancel = w, cancel
	queue := p.stdinQueue
	p.stdinMu.Unlock()
	s.wg.Add(2)
	go func() { // stdin: the queue keeps writes from blocking on a process that does not read
		defer s.wg.Done()
		defer w.Close()
		for {
			select {
			case chunk, ok := <-queue:
				if !ok {
					return
				}
				_, err := w.Write(chunk)
				p.stdinQueued.Add(-int64(len(chunk)))
				select {
				case p.stdinDrained <- struct{}{}:
				default:
				}
				if err != nil {
					return
				}
			case <-p.done:
				return
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		defer cancel()
		// A read of stdin in this process (a filesystem write reads it whole) ends with
		// the exec (killed, the server closing), whether or not the client sent EOF.
		stop := context.AfterFunc(ctx, func() { _ = r.SetReadDeadline(time.Now()) })
		defer stop()
		code, err := fn(ctx, r, p.stdout, p.stderr)
		r.Close()
		p.code, p.err = int32(code), err
		p.stdout.close()
		p.stderr.close()
		close(p.done)
		time.AfterFunc(execRetention, p.forget)
	}()
	return nil
}

// cancelExecs kills every process of a sandbox that ended.
func (sb *sandbox) cancelExecs() {
	sb.execMu.Lock()
	execs := sb.execs
	sb.execs = nil
	sb.execMu.Unlock()
	for _, p := range execs {
		p.kill()
	}
}
