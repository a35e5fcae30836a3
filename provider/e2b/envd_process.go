package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/capped"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// StartOptions describe a process to start.
type StartOptions struct {
	Cmd  string
	Args []string
	Envs map[string]string
	// Cwd is the working directory; empty means the user's home.
	Cwd string
	// Tag names the process for later selection.
	Tag string
	// Stdin keeps stdin open for SendInput; false gives the process an empty stdin.
	Stdin bool
	// Stdout and Stderr receive the output as it comes; nil discards it.
	Stdout, Stderr io.Writer
}

// Process is a started process whose events are being read.
type Process struct {
	PID  uint32
	e    *Envd
	body io.ReadCloser
	o    StartOptions

	res  ProcessResult
	err  error
	done chan struct{}
}

// ProcessResult is how a process ended.
type ProcessResult struct {
	ExitCode int
	// Exited is false when the process was killed by a signal.
	Exited bool
	Status string
	Error  string
}

// Start starts a process and returns once envd reported its pid; the output is
// delivered to o.Stdout/o.Stderr until the process ends (see Wait). Cancelling ctx
// stops reading the stream but does not kill the process (see Kill).
func (e *Envd) Start(ctx context.Context, o StartOptions) (*Process, error) {
	sr := e2bwire.StartRequest{Process: e2bwire.ProcessConfig{Cmd: o.Cmd, Args: o.Args, Envs: o.Envs}}
	if o.Cwd != "" {
		sr.Process.Cwd = &o.Cwd
	}
	if o.Tag != "" {
		sr.Tag = &o.Tag
	}
	stdin := o.Stdin
	sr.Stdin = &stdin
	b, err := json.Marshal(sr)
	if err != nil {
		return nil, err
	}
	var body bytes.Buffer
	if err := e2bwire.WriteEnvelope(&body, 0, b); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.o.BaseURL+e2bwire.PathProcessStart, &body)
	if err != nil {
		return nil, err
	}
	e.header(req.Header)
	req.Header.Set("Content-Type", e2bwire.ContentTypeConnectJSON)
	req.Header.Set(e2bwire.HeaderProtocolVersion, "1")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	resp, err := e.o.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envd start %s: %w", o.Cmd, err)
	}
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, DecodeConnectError(resp.StatusCode, raw)
	}
	p := &Process{e: e, body: resp.Body, o: o, done: make(chan struct{})}
	br := bufio.NewReader(resp.Body)
	for {
		ev, end, err := readEvent(br)
		if err != nil {
			resp.Body.Close()
			return nil, fmt.Errorf("envd start %s: %w", o.Cmd, err)
		}
		if end {
			resp.Body.Close()
			return nil, fmt.Errorf("envd start %s: stream ended before the process started", o.Cmd)
		}
		if ev.Start != nil {
			p.PID = ev.Start.PID
			break
		}
	}
	go p.read(br)
	return p, nil
}

// readEvent reads the next event; end is true at a clean end of stream.
func readEvent(r io.Reader) (ev e2bwire.ProcessEvent, end bool, err error) {
	env, err := e2bwire.ReadEnvelope(r)
	if err == io.EOF {
		return ev, false, io.ErrUnexpectedEOF
	}
	if err != nil {
		return ev, false, err
	}
	if env.Flags&e2bwire.FlagEndStream != 0 {
		return ev, true, e2bwire.ParseEndStream(env.Data)
	}
	var sr e2bwire.StreamResponse
	if err := json.Unmarshal(env.Data, &sr); err != nil {
		return ev, false, fmt.Errorf("decode process event: %w", err)
	}
	return sr.Event, false, nil
}

func (p *Process) read(r io.Reader) {
	defer close(p.done)
	defer p.body.Close()
	var ended bool
	for {
		ev, end, err := readEvent(r)
		if err != nil {
			p.err = err
			return
		}
		if end {
			if !ended {
				p.err = errors.New("process stream ended without an end event")
			}
			return
		}
		switch {
		case ev.Data != nil:
			if len(ev.Data.Stdout) > 0 && p.o.Stdout != nil {
				_, _ = p.o.Stdout.Write(ev.Data.Stdout)
			}
			if len(ev.Data.Stderr) > 0 && p.o.Stderr != nil {
				_, _ = p.o.Stderr.Write(ev.Data.Stderr)
			}
		case ev.End != nil:
			ended = true
			p.res = ProcessResult{ExitCode: int(ev.End.ExitCode), Exited: ev.End.Exited, Status: ev.End.Status}
			if ev.End.Error != nil {
				p.res.Error = *ev.End.Error
			}
		}
	}
}

// Wait waits for the process to end (or ctx). The output writers have received all
// the output when it returns.
func (p *Process) Wait(ctx context.Context) (ProcessResult, error) {
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return ProcessResult{}, ctx.Err()
	}
}

// WaitFor waits for the process at most timeout (none when 0). When the
// timeout or ctx ends the wait, it ends the command too, not just the
// reading of it: it kills the process and stops reading. timedOut says the
// timeout struck; when ctx ended, the error is ctx's.
func (p *Process) WaitFor(ctx context.Context, timeout time.Duration) (res ProcessResult, timedOut bool, err error) {
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err = p.Wait(wctx)
	if err == nil || wctx.Err() == nil {
		return res, false, err
	}
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = p.Kill(kctx)
	cancel()
	p.Detach()
	if ctx.Err() != nil {
		return ProcessResult{}, false, ctx.Err()
	}
	return ProcessResult{}, true, nil
}

// Detach stops reading the process's events; the process keeps running.
func (p *Process) Detach() { p.body.Close() }

// Kill sends SIGKILL.
func (p *Process) Kill(ctx context.Context) error {
	return p.e.SendSignal(ctx, p.PID, e2bwire.SignalSIGKILL)
}

// SendSignal sends SIGTERM or SIGKILL to a process.
func (e *Envd) SendSignal(ctx context.Context, pid uint32, sig e2bwire.Signal) error {
	return e.unary(ctx, e2bwire.PathProcessSendSignal, e2bwire.SendSignalRequest{Process: e2bwire.ProcessSelector{PID: &pid}, Signal: sig}, nil)
}

// SendInput writes data to a process's stdin.
func (e *Envd) SendInput(ctx context.Context, pid uint32, data []byte) error {
	return e.unary(ctx, e2bwire.PathProcessSendInput, e2bwire.SendInputRequest{Process: e2bwire.ProcessSelector{PID: &pid}, Input: e2bwire.ProcessInput{Stdin: data}}, nil)
}

// CloseStdin closes a process's stdin.
func (e *Envd) CloseStdin(ctx context.Context, pid uint32) error {
	return e.unary(ctx, e2bwire.PathProcessCloseStdin, e2bwire.CloseStdinRequest{Process: e2bwire.ProcessSelector{PID: &pid}}, nil)
}

// ListProcesses lists the running processes started through envd.
func (e *Envd) ListProcesses(ctx context.Context) ([]e2bwire.ProcessInfo, error) {
	var r e2bwire.ListResponse
	err := e.unary(ctx, e2bwire.PathProcessList, struct{}{}, &r)
	return r.Processes, err
}

// RunOptions describe a command run by Run.
type RunOptions struct {
	Envs map[string]string
	Cwd  string
	// Timeout kills the command after this long; zero means none. A killed command
	// has exit code 124, like timeout(1).
	Timeout time.Duration
	// Stdout and Stderr receive output as it comes, besides the result.
	Stdout, Stderr io.Writer
	// MaxOutput caps each captured stream; zero means 1 MiB.
	MaxOutput int
}

// RunResult is a finished command.
type RunResult struct {
	ExitCode       int
	Stdout, Stderr string
	// TimedOut is true when Timeout killed the command.
	TimedOut bool
}

// Run runs a bash command line to completion (bash -l -c, as the official SDKs do).
// A non-zero exit is not an error.
func (e *Envd) Run(ctx context.Context, command string, o RunOptions) (RunResult, error) {
	max := o.MaxOutput
	if max <= 0 {
		max = 1 << 20
	}
	stdout, stderr := &capped.Buffer{Max: max}, &capped.Buffer{Max: max}
	var outW, errW io.Writer = stdout, stderr
	if o.Stdout != nil {
		outW = io.MultiWriter(stdout, o.Stdout)
	}
	if o.Stderr != nil {
		errW = io.MultiWriter(stderr, o.Stderr)
	}
	p, err := e.Start(ctx, StartOptions{Cmd: "/bin/bash", Args: []string{"-l", "-c", command}, Envs: o.Envs, Cwd: o.Cwd, Stdout: outW, Stderr: errW})
	if err != nil {
		return RunResult{}, err
	}
	res, timedOut, err := p.WaitFor(ctx, o.Timeout)
	if timedOut {
		return RunResult{ExitCode: 124, Stdout: stdout.String(), Stderr: stderr.String(), TimedOut: true}, nil
	}
	if err != nil {
		return RunResult{}, err
	}
	return RunResult{ExitCode: res.ExitCode, Stdout: stdout.String(), Stderr: stderr.String()}, nil
}
