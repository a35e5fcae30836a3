package modalserver

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// routerServer is the task command router: exec with offset-addressed stdio, stdin
// writes, waits and filesystem snapshots.
type routerServer struct {
	pb.UnimplementedTaskCommandRouterServer
	s *Server
}

// process is one exec: a command in the engine, or the filesystem tool the server
// runs itself.
type process struct {
	stdout, stderr *output

	stdinMu      sync.Mutex
	stdinW       *os.File // nil once closed
	stdinWritten uint64
	stdinQueue   chan []byte

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
// client resent after a reconnect.
func (p *process) stdinWrite(offset uint64, data []byte, eof bool) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if offset > p.stdinWritten {
		return status.Errorf(codes.InvalidArgument, "stdin offset %d is past the %d bytes written", offset, p.stdinWritten)
	}
	skip := p.stdinWritten - offset
	if skip < uint64(len(data)) {
		if p.stdinQueue == nil {
			if len(data) > 0 {
				return status.Error(codes.FailedPrecondition, "stdin is closed")
			}
		} else {
			chunk := append([]byte(nil), data[skip:]...)
			select {
			case p.stdinQueue <- chunk:
			case <-p.done:
				// What Modal answers when the program is gone; the SDKs' file writes
				// take it as "exited early".
				return status.Error(codes.FailedPrecondition, "the process has exited")
			}
			p.stdinWritten += uint64(len(chunk))
		}
	}
	if eof && p.stdinQueue != nil {
		close(p.stdinQueue)
		p.stdinQueue = nil
	}
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

const stdinQueueDepth = 1024

// procFunc is what a process runs; it gets stdin as a reader.
type procFunc func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error)

// newProcess is a process that writes to stdout and stderr.
func newProcess(stdout, stderr *output) *process {
	p := &process{stdout: stdout, stderr: stderr, stdinQueue: make(chan []byte, stdinQueueDepth),
		done: make(chan struct{}), forget: func() {}}
	p.cancel = func() {}
	return p
}

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
				if _, err := w.Write(chunk); err != nil {
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

func (r *routerServer) process(ctx context.Context, taskID, execID string) (*process, error) {
	sb, err := r.s.lookupTask(ctx, taskID)
	if err != nil {
		return nil, err
	}
	sb.execMu.Lock()
	p := sb.execs[execID]
	sb.execMu.Unlock()
	if p == nil {
		return nil, status.Errorf(codes.NotFound, "exec %s not found", execID)
	}
	return p, nil
}

func (r *routerServer) TaskExecStart(ctx context.Context, req *pb.TaskExecStartRequest) (*pb.TaskExecStartResponse, error) {
	s := r.s
	sb, err := s.lookupTask(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	finished := sb.result != nil
	s.mu.Unlock()
	if finished {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox '%s' has already finished", sb.id)
	}
	args := req.GetCommandArgs()
	if len(args) == 0 {
		return nil, status.Error(codes.InvalidArgument, "command is empty")
	}
	env := map[string]string{}
	for _, id := range req.GetSecretIds() {
		if err := s.addSecret(env, id); err != nil {
			return nil, err
		}
	}
	if err := s.addSources(env, req.GetSecretSources()); err != nil {
		return nil, err
	}
	for k, v := range req.GetEnv() {
		env[k] = v
	}
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	cwd := sb.workdir
	if req.HasWorkdir() {
		cwd = req.GetWorkdir()
	}
	timeout := time.Duration(req.GetTimeoutSecs()) * time.Second
	discardOut := req.GetStdoutConfig() == pb.TaskExecStdoutConfig_TASK_EXEC_STDOUT_CONFIG_DEVNULL
	discardErr := req.GetStderrConfig() == pb.TaskExecStderrConfig_TASK_EXEC_STDERR_CONFIG_DEVNULL

	var fn func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error)
	if args[0] == fsToolsPath {
		if len(args) != 2 {
			return nil, status.Error(codes.InvalidArgument, "modal-sandbox-fs-tools takes one JSON argument")
		}
		fn = func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error) {
			return s.fsTool(ctx, sb, args[1], stdin, stdout, stderr), nil
		}
	} else {
		fn = func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error) {
			er := engine.ExecRequest{Argv: args, Cwd: cwd, Env: envList, Timeout: timeout, Stdin: stdin, Stdout: stdout, Stderr: stderr}
			if pty := req.GetPtyInfo(); pty.GetEnabled() {
				// One terminal: everything the command prints comes on stdout.
				er.TTY, er.Size = true, engine.WindowSize{Cols: uint16(pty.GetWinszCols()), Rows: uint16(pty.GetWinszRows())}
				if t := pty.GetEnvTerm(); t != "" {
					er.Env = append(er.Env, "TERM="+t)
				}
			}
			if discardOut {
				er.Stdout = nil
			}
			if discardErr {
				er.Stderr = nil
			}
			code, err := s.o.Engine.Exec(ctx, sb.engineID, er)
			if errors.Is(err, engine.ErrTimeout) {
				return 124, nil // what `timeout` reports; the SDK reads the exit code
			}
			return code, err
		}
	}
	if _, err := s.start(sb, req.GetExecId(), fn); err != nil {
		return nil, err
	}
	return pb.TaskExecStartResponse_builder{}.Build(), nil
}

func (r *routerServer) TaskExecStdioRead(req *pb.TaskExecStdioReadRequest, stream grpc.ServerStreamingServer[pb.TaskExecStdioReadResponse]) error {
	if err := taskAllowed(stream.Context(), req.GetTaskId()); err != nil {
		return err
	}
	p, err := r.process(stream.Context(), req.GetTaskId(), req.GetExecId())
	if err != nil {
		return err
	}
	out, which := p.stdout, 0
	switch req.GetFileDescriptor() {
	case pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT:
	case pb.TaskExecStdioFileDescriptor_TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDERR:
		out, which = p.stderr, 1
	default:
		return status.Error(codes.InvalidArgument, "unsupported file descriptor")
	}
	off := req.GetOffset()
	for {
		chunk, _, eof, err := out.read(stream.Context(), off, 64<<10)
		if err != nil {
			return grpcError(err)
		}
		if eof {
			p.delivered(which)
			return nil
		}
		if err := stream.Send(pb.TaskExecStdioReadResponse_builder{Data: chunk}.Build()); err != nil {
			return err
		}
		off += uint64(len(chunk))
	}
}

func (r *routerServer) TaskExecStdinWrite(ctx context.Context, req *pb.TaskExecStdinWriteRequest) (*pb.TaskExecStdinWriteResponse, error) {
	p, err := r.process(ctx, req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	if err := p.stdinWrite(req.GetOffset(), req.GetData(), req.GetEof()); err != nil {
		return nil, err
	}
	return pb.TaskExecStdinWriteResponse_builder{}.Build(), nil
}

func (r *routerServer) TaskExecStdinWriteStream(stream grpc.ClientStreamingServer[pb.TaskExecStdinWriteStreamRequest, pb.TaskExecStdinWriteStreamResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first message must be start")
	}
	if err := taskAllowed(stream.Context(), start.GetTaskId()); err != nil {
		return err
	}
	p, err := r.process(stream.Context(), start.GetTaskId(), start.GetExecId())
	if err != nil {
		return err
	}
	off := start.GetOffset()
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			// The end of the stream is the end of stdin.
			if err := p.stdinWrite(off, nil, true); err != nil {
				return err
			}
			return stream.SendAndClose(pb.TaskExecStdinWriteStreamResponse_builder{}.Build())
		}
		if err != nil {
			return err
		}
		if msg.HasEnd() {
			if err := p.stdinWrite(off, nil, true); err != nil {
				return err
			}
			continue
		}
		if err := p.stdinWrite(off, msg.GetData(), false); err != nil {
			return err
		}
		off += uint64(len(msg.GetData()))
	}
}

func (r *routerServer) TaskExecStdinStatus(ctx context.Context, req *pb.TaskExecStdinStatusRequest) (*pb.TaskExecStdinStatusResponse, error) {
	p, err := r.process(ctx, req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	n, closed := p.stdinStatus()
	return pb.TaskExecStdinStatusResponse_builder{NumBytesWritten: n, Closed: closed}.Build(), nil
}

func (r *routerServer) TaskExecWait(ctx context.Context, req *pb.TaskExecWaitRequest) (*pb.TaskExecWaitResponse, error) {
	p, err := r.process(ctx, req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-p.done:
	}
	if p.err != nil {
		return nil, engineError("exec", p.err)
	}
	p.delivered(2)
	return pb.TaskExecWaitResponse_builder{Code: &p.code}.Build(), nil
}

func (r *routerServer) TaskExecPoll(ctx context.Context, req *pb.TaskExecPollRequest) (*pb.TaskExecPollResponse, error) {
	p, err := r.process(ctx, req.GetTaskId(), req.GetExecId())
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
		if p.err != nil {
			return nil, engineError("exec", p.err)
		}
		p.delivered(2)
		return pb.TaskExecPollResponse_builder{Code: &p.code}.Build(), nil
	default:
		return pb.TaskExecPollResponse_builder{}.Build(), nil
	}
}

func (r *routerServer) TaskSnapshotFilesystem(ctx context.Context, req *pb.TaskSnapshotFilesystemRequest) (*pb.TaskSnapshotFilesystemResponse, error) {
	s := r.s
	sb, err := s.lookupTask(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCustomerSuppliedEncryptionKey()) > 0 {
		return nil, localOnly("encrypted snapshots are not available")
	}
	snap, err := s.o.Engine.Snapshot(ctx, sb.engineID)
	if err != nil {
		return nil, engineError("snapshot", err)
	}
	s.mu.Lock()
	parent := s.images[sb.imageID]
	s.mu.Unlock()
	img := &image{id: newID("im"), snapshot: snap}
	if parent != nil {
		img.tag = parent.tag
	}
	if err := s.addImage(img); err != nil {
		return nil, status.Errorf(codes.Internal, "saving image: %v", err)
	}
	return pb.TaskSnapshotFilesystemResponse_builder{ImageId: img.id}.Build(), nil
}

func (r *routerServer) SandboxWaitUntilReady(ctx context.Context, req *pb.SandboxWaitUntilReadyTcrRequest) (*pb.SandboxWaitUntilReadyTcrResponse, error) {
	// The local server has no readiness probes: a created sandbox is ready.
	return pb.SandboxWaitUntilReadyTcrResponse_builder{}.Build(), nil
}
