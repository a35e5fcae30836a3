package modalserver

import (
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// --- how a sandbox ends -----------------------------------------------------------------
//
// Whatever ends a sandbox first records its result, once (finish): a terminate
// (TERMINATED, 137), its timeout (TIMEOUT, 124), or its command's exit (SUCCESS or
// FAILURE with the exit code). The SDKs turn the status into wait()'s number. An ended
// sandbox is removed from the engine, as Modal removes it; the server keeps its record
// (result, tags) in memory for wait, list with includeFinished and from-name.

func terminatedResult() *pb.GenericResult {
	return pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_TERMINATED, Exitcode: 137}.Build()
}

func timeoutResult() *pb.GenericResult {
	return pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_TIMEOUT, Exitcode: 124,
		Exception: "Sandbox timed out"}.Build()
}

// finish records how a sandbox ended, once, and stops what runs in it.
func (s *Server) finish(sb *sandbox, r *pb.GenericResult) {
	s.mu.Lock()
	first := sb.result == nil
	if first {
		sb.result = r
		close(sb.ended)
		s.keepFinishedLocked(sb)
	}
	entry := sb.entry
	s.mu.Unlock()
	if first {
		sb.stdout.close()
		sb.stderr.close()
	}
	if entry != nil {
		entry.kill()
	}
	sb.cancelExecs()
}

// maxFinished is how many ended sandboxes the server remembers (for wait, list with
// finished ones, fromName); the oldest-ended record goes first.
const maxFinished = 1024

// keepFinishedLocked adds sb to the ended records and drops the oldest past maxFinished.
func (s *Server) keepFinishedLocked(sb *sandbox) {
	s.finished = append(s.finished, sb)
	for len(s.finished) > s.maxFinished {
		old := s.finished[0]
		s.finished = s.finished[1:]
		if s.sandboxes[old.id] == old {
			delete(s.sandboxes, old.id)
			delete(s.tasks, old.taskID)
		}
	}
}

// endSandbox removes an ended sandbox from the engine and closes its tunnels.
func (s *Server) endSandbox(sb *sandbox) {
	s.mu.Lock()
	eid := sb.engineID
	s.mu.Unlock()
	for try := 0; eid != ""; try++ {
		err := s.o.Engine.Terminate(context.WithoutCancel(s.ctx()), eid)
		if err == nil || errors.Is(err, engine.ErrNotFound) {
			break
		}
		if try == 2 {
			s.log.Warn("remove an ended sandbox", "sandbox", sb.id, "err", err)
			break
		}
		time.Sleep(200 * time.Millisecond << try)
	}
	s.closeTunnels(sb.id)
}

// timedOut says whether the sandbox's timeout is what ended it: its deadline has
// passed, or the engine says it died of its timeout (exit 124).
func (s *Server) timedOut(sb *sandbox) bool {
	if !sb.deadline.IsZero() && !s.o.Now().Before(sb.deadline) {
		return true
	}
	info, err := s.o.Engine.Get(context.WithoutCancel(s.ctx()), sb.engineID)
	return err == nil && info.State == engine.StateDead && info.ExitCode != nil && *info.ExitCode == 124
}

// watchDeadline ends the sandbox at its deadline if nothing else ended it first: the
// engine kills it then (Spec.Timeout); the server records TIMEOUT and removes it.
func (s *Server) watchDeadline(sb *sandbox) {
	if sb.deadline.IsZero() {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(time.Until(sb.deadline))
		defer t.Stop()
		select {
		case <-s.done:
			return
		case <-sb.ended:
			return
		case <-t.C:
		}
		// Give the engine a moment to end it itself (its exit says why), then end it here.
		for range 50 {
			info, err := s.o.Engine.Get(s.ctx(), sb.engineID)
			if err != nil || info.State == engine.StateDead {
				break
			}
			select {
			case <-s.done:
				return
			case <-sb.ended:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		s.finish(sb, timeoutResult())
		s.endSandbox(sb)
	}()
}

// runEntrypoint runs the sandbox's command, on a terminal when pty says so; its output
// goes to the sandbox's stdout and stderr rings. The sandbox ends when it does.
func (s *Server) runEntrypoint(sb *sandbox, args []string, pty *pb.PTYInfo) error {
	p := newProcess(sb.stdout, sb.stderr)
	s.mu.Lock()
	sb.entry = p
	s.mu.Unlock()
	return s.run(p, func(ctx context.Context, stdin *os.File, stdout, stderr io.Writer) (int, error) {
		req := engine.ExecRequest{Argv: args, Cwd: sb.workdir, Stdin: stdin, Stdout: stdout, Stderr: stderr}
		if pty.GetEnabled() {
			req.TTY, req.Size = true, engine.WindowSize{Cols: uint16(pty.GetWinszCols()), Rows: uint16(pty.GetWinszRows())}
		}
		code, err := s.o.Engine.Exec(ctx, sb.engineID, req)
		if s.ctx().Err() != nil {
			return code, err // the server is closing; the sandbox lives on
		}
		r := pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS, Exitcode: int32(code)}.Build()
		switch {
		case s.timedOut(sb):
			r = timeoutResult()
		case err != nil:
			r = pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_FAILURE, Exitcode: int32(code), Exception: err.Error()}.Build()
		case code != 0:
			r.SetStatus(pb.GenericResult_GENERIC_STATUS_FAILURE)
		}
		s.finish(sb, r)
		s.endSandbox(sb)
		return code, err
	})
}

// --- the entrypoint's stdio -------------------------------------------------------------

func (r *routerServer) SandboxStdioReadV2(req *pb.SandboxStdioReadV2Request, stream grpc.ServerStreamingServer[pb.SandboxStdioReadV2Response]) error {
	if err := taskAllowed(stream.Context(), req.GetTaskId()); err != nil {
		return err
	}
	sb, err := r.s.lookupTask(stream.Context(), req.GetTaskId())
	if err != nil {
		return err
	}
	out := sb.stdout
	switch req.GetFileDescriptor() {
	case pb.SandboxStdioFileDescriptor_SANDBOX_STDIO_FILE_DESCRIPTOR_STDOUT:
	case pb.SandboxStdioFileDescriptor_SANDBOX_STDIO_FILE_DESCRIPTOR_STDERR:
		out = sb.stderr
	default:
		return status.Error(codes.InvalidArgument, "unsupported file descriptor")
	}
	off, first := req.GetOffset(), true
	for {
		chunk, start, eof, err := out.read(stream.Context(), off, 64<<10)
		if err != nil {
			return grpcError(err)
		}
		if eof {
			return nil
		}
		if !first && start != off {
			// The ring dropped bytes under this reader: the SDK takes a new starting
			// offset only from the first message of a stream, so it must reconnect.
			return status.Errorf(codes.Unavailable, "output before offset %d was dropped; read again", start)
		}
		first = false
		if err := stream.Send(pb.SandboxStdioReadV2Response_builder{Data: chunk, StartingOffset: start}.Build()); err != nil {
			return err
		}
		off = start + uint64(len(chunk))
	}
}

func (r *routerServer) SandboxStdinWriteV2(ctx context.Context, req *pb.SandboxStdinWriteV2Request) (*pb.SandboxStdinWriteV2Response, error) {
	sb, err := r.s.lookupTask(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	p, err := r.s.entrypoint(sb)
	if err != nil {
		return nil, err
	}
	if err := p.stdinWrite(ctx, req.GetOffset(), req.GetData(), req.GetEof()); err != nil {
		return nil, err
	}
	return pb.SandboxStdinWriteV2Response_builder{}.Build(), nil
}

func (s *Server) entrypoint(sb *sandbox) (*process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb.entry == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox '%s' has no command: its stdin goes nowhere", sb.id)
	}
	return sb.entry, nil
}

// SandboxGetLogs is the V1 sandboxes' stdout/stderr: batches whose entry id is the
// offset after them, read from the same rings as SandboxStdioReadV2.
func (s *Server) SandboxGetLogs(req *pb.SandboxGetLogsRequest, stream grpc.ServerStreamingServer[pb.TaskLogsBatch]) error {
	sb, err := s.lookup(stream.Context(), req.GetSandboxId())
	if err != nil {
		return err
	}
	out := sb.stdout
	switch req.GetFileDescriptor() {
	case pb.FileDescriptor_FILE_DESCRIPTOR_STDOUT:
	case pb.FileDescriptor_FILE_DESCRIPTOR_STDERR:
		out = sb.stderr
	default:
		return status.Error(codes.InvalidArgument, "unsupported file descriptor")
	}
	var off uint64
	if last := req.GetLastEntryId(); last != "" && last != "0-0" {
		if off, err = strconv.ParseUint(last, 10, 64); err != nil {
			return status.Errorf(codes.InvalidArgument, "entry id %q is not one this server gave", last)
		}
	}
	timeout := time.Duration(req.GetTimeout() * float32(time.Second))
	if timeout <= 0 {
		timeout = 55 * time.Second
	}
	ctx, cancel := context.WithTimeout(stream.Context(), timeout)
	defer cancel()
	for {
		chunk, start, eof, err := out.read(ctx, off, 64<<10)
		if errors.Is(err, context.DeadlineExceeded) && stream.Context().Err() == nil {
			return nil // the client asks again from its last entry id
		}
		if err != nil {
			return grpcError(err)
		}
		if !eof {
			chunk = completeRunes(chunk)
		}
		off = start + uint64(len(chunk))
		b := pb.TaskLogsBatch_builder{SandboxId: sb.id, EntryId: strconv.FormatUint(off, 10), Eof: eof}
		if len(chunk) > 0 {
			b.Items = []*pb.TaskLogs{pb.TaskLogs_builder{Data: strings.ToValidUTF8(string(chunk), "\uFFFD"),
				FileDescriptor: req.GetFileDescriptor()}.Build()}
		}
		if err := stream.Send(b.Build()); err != nil {
			return err
		}
		if eof {
			return nil
		}
	}
}

// completeRunes cuts a trailing incomplete UTF-8 sequence (it comes with the next
// batch: TaskLogs carries text).
func completeRunes(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax-1 && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) && len(b) > i {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// SandboxStdinWrite is the V1 sandboxes' stdin: numbered chunks (from 1), a repeated
// index is a retry and taken once.
func (s *Server) SandboxStdinWrite(ctx context.Context, req *pb.SandboxStdinWriteRequest) (*pb.SandboxStdinWriteResponse, error) {
	sb, err := s.lookup(ctx, req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	p, err := s.entrypoint(sb)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	dup := req.GetIndex() != 0 && req.GetIndex() <= sb.stdinIndex
	if !dup {
		sb.stdinIndex = req.GetIndex()
	}
	s.mu.Unlock()
	if dup {
		return pb.SandboxStdinWriteResponse_builder{}.Build(), nil
	}
	written, _ := p.stdinStatus()
	if err := p.stdinWrite(ctx, written, req.GetInput(), req.GetEof()); err != nil {
		return nil, err
	}
	return pb.SandboxStdinWriteResponse_builder{}.Build(), nil
}
