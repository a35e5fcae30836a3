package e2bserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// chunk is the largest data event; envd sends output in pieces of this size too.
const chunk = 32 << 10

// maxQueued bounds the output queued for one slow stream; past it the stream is
// ended rather than the process stalled or the server's memory grown.
const maxQueued = 16 << 20

// procTable holds the processes started through envd in one sandbox. They run until
// they exit, are signalled, or the sandbox goes: a stream that disconnects leaves its
// process running, as envd does.
type procTable struct {
	mu    sync.Mutex
	next  uint32
	procs map[uint32]*proc
}

func newProcTable() *procTable { return &procTable{next: 1000, procs: map[uint32]*proc{}} }

// proc is one running process.
type proc struct {
	pid    uint32
	tag    string
	cfg    e2bwire.ProcessConfig
	cancel context.CancelFunc
	stdin  *io.PipeWriter // nil without stdin
	// resize carries a terminal's new sizes; nil without a terminal.
	resize chan engine.WindowSize

	mu     sync.Mutex
	subs   map[*sub]bool
	ended  *e2bwire.EndEvent
	killed bool
	done   chan struct{}
}

// sub is one stream's queue of events.
type sub struct {
	mu     sync.Mutex
	queue  []e2bwire.ProcessEvent
	size   int
	over   bool
	notify chan struct{}
}

func (s *sub) push(ev e2bwire.ProcessEvent, n int) {
	s.mu.Lock()
	if s.size+n > maxQueued {
		s.over = true
	} else if !s.over {
		s.queue = append(s.queue, ev)
		s.size += n
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// take returns the queued events; over says the stream fell too far behind.
func (s *sub) take() (evs []e2bwire.ProcessEvent, over bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs, s.queue, s.size = s.queue, nil, 0
	return evs, s.over
}

func (p *proc) publish(ev e2bwire.ProcessEvent, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		s.push(ev, n)
	}
}

// subscribe adds a stream; ok is false when the process already ended (end is then
// its end event).
func (p *proc) subscribe() (s *sub, end *e2bwire.EndEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != nil {
		return nil, p.ended
	}
	s = &sub{notify: make(chan struct{}, 1)}
	p.subs[s] = true
	return s, nil
}

func (p *proc) unsubscribe(s *sub) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// outWriter turns a stream of the process into data events.
type outWriter struct {
	p      *proc
	stderr bool
	pty    bool
}

func (w outWriter) Write(b []byte) (int, error) {
	for off := 0; off < len(b); off += chunk {
		part := append([]byte(nil), b[off:min(off+chunk, len(b))]...)
		d := &e2bwire.DataEvent{Stdout: part}
		switch {
		case w.pty:
			d = &e2bwire.DataEvent{PTY: part}
		case w.stderr:
			d = &e2bwire.DataEvent{Stderr: part}
		}
		w.p.publish(e2bwire.ProcessEvent{Data: d}, len(part))
	}
	return len(b), nil
}

// start runs a process in the engine sandbox eid. The process's lifetime is the
// server's (parent), not the request's.
func (t *procTable) start(parent context.Context, eng engine.Engine, eid string, req e2bwire.StartRequest, wg *sync.WaitGroup) (*proc, *sub, error) {
	if req.Process.Cmd == "" {
		return nil, nil, &connectErr{e2bwire.CodeInvalidArgument, "process.cmd is required"}
	}
	env := make([]string, 0, len(req.Process.Envs))
	for _, k := range slices.Sorted(maps.Keys(req.Process.Envs)) {
		if !validEnvName(k) {
			return nil, nil, &connectErr{e2bwire.CodeInvalidArgument, "invalid environment variable " + strconv.Quote(k)}
		}
		env = append(env, k+"="+req.Process.Envs[k])
	}
	cwd := ""
	if req.Process.Cwd != nil {
		cwd = *req.Process.Cwd
	}
	ctx, cancel := context.WithCancel(parent)
	// The first stream subscribes before the process runs, so it misses no output.
	first := &sub{notify: make(chan struct{}, 1)}
	p := &proc{cfg: req.Process, cancel: cancel, subs: map[*sub]bool{first: true}, done: make(chan struct{})}
	if req.Tag != nil {
		p.tag = *req.Tag
	}
	var stdin io.Reader
	if (req.Stdin != nil && *req.Stdin) || req.PTY != nil {
		pr, pw := io.Pipe()
		stdin, p.stdin = pr, pw
	}
	xr := engine.ExecRequest{Argv: append([]string{req.Process.Cmd}, req.Process.Args...), Cwd: cwd, Env: env,
		Stdin: stdin, Stdout: outWriter{p: p}, Stderr: outWriter{p: p, stderr: true}}
	if req.PTY != nil {
		p.resize = make(chan engine.WindowSize, 1)
		xr.TTY, xr.Size, xr.Resize = true, windowSize(req.PTY.Size), p.resize
		xr.Stdout, xr.Stderr = outWriter{p: p, pty: true}, nil
	}
	t.mu.Lock()
	t.next++
	p.pid = t.next
	t.procs[p.pid] = p
	t.mu.Unlock()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		code, err := eng.Exec(ctx, eid, xr)
		if p.stdin != nil {
			p.stdin.CloseWithError(io.ErrClosedPipe)
		}
		end := &e2bwire.EndEvent{ExitCode: int32(code), Exited: true, Status: "exit status " + strconv.Itoa(code)}
		p.mu.Lock()
		killed := p.killed
		p.mu.Unlock()
		switch {
		case killed || (err != nil && ctx.Err() != nil):
			end = &e2bwire.EndEvent{ExitCode: -1, Status: "signal: killed"}
		case err != nil:
			msg := err.Error()
			end = &e2bwire.EndEvent{ExitCode: -1, Status: "error", Error: &msg}
		}
		t.mu.Lock()
		delete(t.procs, p.pid)
		t.mu.Unlock()
		p.mu.Lock()
		p.ended = end
		subs := p.subs
		p.subs = map[*sub]bool{}
		p.mu.Unlock()
		for s := range subs {
			s.push(e2bwire.ProcessEvent{End: end}, 0)
		}
		close(p.done)
	}()
	return p, first, nil
}

// windowSize clamps a requested terminal size into the engine's.
func windowSize(s e2bwire.PTYSize) engine.WindowSize {
	return engine.WindowSize{Cols: uint16(min(max(s.Cols, 1), 1000)), Rows: uint16(min(max(s.Rows, 1), 1000))}
}

// setSize resizes p's terminal; the latest size wins when the engine lags.
func (p *proc) setSize(s e2bwire.PTYSize) error {
	if p.resize == nil {
		return &connectErr{e2bwire.CodeFailedPrecondition, "process has no terminal"}
	}
	ws := windowSize(s)
	for {
		select {
		case p.resize <- ws:
			return nil
		default:
		}
		select {
		case <-p.resize:
		default:
		}
	}
}

// find selects a running process by pid or tag.
func (t *procTable) find(sel e2bwire.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case sel.PID != nil:
		if p, ok := t.procs[*sel.PID]; ok {
			return p, nil
		}
		return nil, &connectErr{e2bwire.CodeNotFound, fmt.Sprintf("process with pid %d not found", *sel.PID)}
	case sel.Tag != nil:
		for _, p := range t.procs {
			if p.tag == *sel.Tag {
				return p, nil
			}
		}
		return nil, &connectErr{e2bwire.CodeNotFound, fmt.Sprintf("process with tag %q not found", *sel.Tag)}
	}
	return nil, &connectErr{e2bwire.CodeInvalidArgument, "process selector is required"}
}

func (t *procTable) list() []e2bwire.ProcessInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]e2bwire.ProcessInfo, 0, len(t.procs))
	for _, p := range t.procs {
		pi := e2bwire.ProcessInfo{Config: p.cfg, PID: p.pid}
		if p.tag != "" {
			tag := p.tag
			pi.Tag = &tag
		}
		out = append(out, pi)
	}
	return out
}

// kill ends a process (the engine kills it when its context ends).
func (p *proc) kill() {
	p.mu.Lock()
	p.killed = true
	p.mu.Unlock()
	p.cancel()
}

// killAll kills every process; it does not wait for them.
func (t *procTable) killAll() {
	t.mu.Lock()
	procs := make([]*proc, 0, len(t.procs))
	for _, p := range t.procs {
		procs = append(procs, p)
	}
	t.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

// connectErr is an envd error with its Connect code.
type connectErr struct {
	code, msg string
}

func (e *connectErr) Error() string { return e.code + ": " + e.msg }

// asConnect maps any error to a Connect error for the client.
func asConnect(err error) *e2bwire.ConnectError {
	var ce *connectErr
	var fe *fsError
	switch {
	case errors.As(err, &ce):
		return &e2bwire.ConnectError{Code: ce.code, Message: ce.msg}
	case errors.As(err, &fe):
		return &e2bwire.ConnectError{Code: fe.code, Message: fe.msg}
	case errors.Is(err, engine.ErrNotFound), errors.Is(err, errNoFile):
		return &e2bwire.ConnectError{Code: e2bwire.CodeNotFound, Message: err.Error()}
	case errors.Is(err, engine.ErrUnsupported):
		return &e2bwire.ConnectError{Code: e2bwire.CodeUnimplemented, Message: err.Error()}
	case errors.Is(err, engine.ErrIsDir), errors.Is(err, engine.ErrNotDir), errors.Is(err, engine.ErrLimit):
		return &e2bwire.ConnectError{Code: e2bwire.CodeInvalidArgument, Message: err.Error()}
	case errors.Is(err, engine.ErrNotEmpty), errors.Is(err, engine.ErrInUse):
		return &e2bwire.ConnectError{Code: e2bwire.CodeFailedPrecondition, Message: err.Error()}
	case errors.Is(err, context.DeadlineExceeded):
		return &e2bwire.ConnectError{Code: e2bwire.CodeDeadlineExceeded, Message: err.Error()}
	}
	return &e2bwire.ConnectError{Code: e2bwire.CodeInternal, Message: err.Error()}
}
