package e2bserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

type unaryHandler func(ctx context.Context, body []byte) (any, error)

func unary[T any](f func(context.Context, T) (any, error)) unaryHandler {
	return func(ctx context.Context, body []byte) (any, error) {
		var in T
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &in); err != nil {
				return nil, &connectErr{e2bwire.CodeInvalidArgument, "invalid JSON: " + err.Error()}
			}
		}
		return f(ctx, in)
	}
}

// unaryHandlers are envd's unary calls: the process service's and the filesystem's.
func (c envdCall) unaryHandlers() map[string]unaryHandler {
	hs := c.processHandlers()
	maps.Copy(hs, c.fsHandlers())
	return hs
}

func (c envdCall) processHandlers() map[string]unaryHandler {
	return map[string]unaryHandler{
		e2bwire.PathProcessList: unary(func(ctx context.Context, _ struct{}) (any, error) {
			return e2bwire.ListResponse{Processes: c.procs.list()}, nil
		}),
		e2bwire.PathProcessSendSignal: unary(func(ctx context.Context, in e2bwire.SendSignalRequest) (any, error) {
			p, err := c.procs.find(in.Process)
			if err != nil {
				return nil, err
			}
			switch in.Signal {
			case e2bwire.SignalSIGKILL, e2bwire.SignalSIGTERM:
			default:
				return nil, &connectErr{e2bwire.CodeInvalidArgument, "unsupported signal " + string(in.Signal)}
			}
			p.kill()
			return struct{}{}, nil
		}),
		e2bwire.PathProcessSendInput: unary(func(ctx context.Context, in e2bwire.SendInputRequest) (any, error) {
			p, err := c.procs.find(in.Process)
			if err != nil {
				return nil, err
			}
			if p.stdin == nil {
				return nil, &connectErr{e2bwire.CodeFailedPrecondition, "process was started without stdin"}
			}
			data := in.Input.Stdin
			if data == nil {
				data = in.Input.PTY
			}
			if _, err := writeCtx(ctx, p.stdin, data); err != nil {
				return nil, &connectErr{e2bwire.CodeFailedPrecondition, "write stdin: " + err.Error()}
			}
			return struct{}{}, nil
		}),
		e2bwire.PathProcessUpdate: unary(func(ctx context.Context, in e2bwire.UpdateRequest) (any, error) {
			p, err := c.procs.find(in.Process)
			if err != nil {
				return nil, err
			}
			if in.PTY == nil {
				return struct{}{}, nil
			}
			return struct{}{}, p.setSize(in.PTY.Size)
		}),
		e2bwire.PathProcessCloseStdin: unary(func(ctx context.Context, in e2bwire.CloseStdinRequest) (any, error) {
			p, err := c.procs.find(in.Process)
			if err != nil {
				return nil, err
			}
			if p.stdin != nil {
				p.stdin.Close()
			}
			return struct{}{}, nil
		}),
	}
}

func (c envdCall) fsHandlers() map[string]unaryHandler {
	return map[string]unaryHandler{
		e2bwire.PathFilesystemStat: unary(func(ctx context.Context, in e2bwire.PathRequest) (any, error) {
			e, err := c.fs().stat(ctx, resolve(in.Path))
			if err != nil {
				return nil, err
			}
			return e2bwire.EntryResponse{Entry: &e}, nil
		}),
		e2bwire.PathFilesystemListDir: unary(func(ctx context.Context, in e2bwire.ListDirRequest) (any, error) {
			depth := max(int(in.Depth), 1)
			if depth > 32 {
				return nil, &connectErr{e2bwire.CodeInvalidArgument, "depth must be at most 32"}
			}
			es, err := c.fs().list(ctx, resolve(in.Path), depth, maxListDir)
			if err != nil {
				return nil, err
			}
			return e2bwire.ListDirResponse{Entries: es}, nil
		}),
		e2bwire.PathFilesystemMakeDir: unary(func(ctx context.Context, in e2bwire.PathRequest) (any, error) {
			p := resolve(in.Path)
			if err := c.fs().mkdir(ctx, p); err != nil {
				return nil, err
			}
			e, err := c.fs().stat(ctx, p)
			if err != nil {
				return nil, err
			}
			return e2bwire.EntryResponse{Entry: &e}, nil
		}),
		e2bwire.PathFilesystemRemove: unary(func(ctx context.Context, in e2bwire.PathRequest) (any, error) {
			// An empty path would mean the home directory: refused, as is the root.
			if strings.TrimSpace(in.Path) == "" || resolve(in.Path) == "/" {
				return nil, &connectErr{e2bwire.CodeInvalidArgument, "refusing to remove " + strconv.Quote(in.Path) + ": name a path below /"}
			}
			return struct{}{}, c.fs().remove(ctx, resolve(in.Path))
		}),
		e2bwire.PathFilesystemMove: unary(func(ctx context.Context, in e2bwire.MoveRequest) (any, error) {
			if strings.TrimSpace(in.Source) == "" || strings.TrimSpace(in.Destination) == "" {
				return nil, &connectErr{e2bwire.CodeInvalidArgument, "source and destination are required"}
			}
			src, dst := resolve(in.Source), resolve(in.Destination)
			if src == "/" || dst == "/" {
				return nil, &connectErr{e2bwire.CodeInvalidArgument, "refusing to move / or onto /"}
			}
			if err := c.fs().move(ctx, src, dst); err != nil {
				return nil, err
			}
			e, err := c.fs().stat(ctx, dst)
			if err != nil {
				return nil, err
			}
			return e2bwire.EntryResponse{Entry: &e}, nil
		}),
	}
}

// writeCtx writes to a pipe, giving up when ctx ends (a process that never reads its
// stdin must not hold the request forever).
func writeCtx(ctx context.Context, w io.Writer, b []byte) (int, error) {
	type res struct {
		n   int
		err error
	}
	ch := make(chan res, 1)
	go func() {
		n, err := w.Write(b)
		ch <- res{n, err}
	}()
	select {
	case r := <-ch:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
