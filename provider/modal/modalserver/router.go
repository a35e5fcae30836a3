package modalserver

import (
	"context"
	"errors"
	"io"
	"os"
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
	if err := p.stdinWrite(ctx, req.GetOffset(), req.GetData(), req.GetEof()); err != nil {
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
			if err := p.stdinWrite(stream.Context(), off, nil, true); err != nil {
				return err
			}
			return stream.SendAndClose(pb.TaskExecStdinWriteStreamResponse_builder{}.Build())
		}
		if err != nil {
			return err
		}
		if msg.HasEnd() {
			if err := p.stdinWrite(stream.Context(), off, nil, true); err != nil {
				return err
			}
			continue
		}
		if err := p.stdinWrite(stream.Context(), off, msg.GetData(), false); err != nil {
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
