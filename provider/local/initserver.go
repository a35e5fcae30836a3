package local

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
)

type spawnRes struct {
	pid  int
	wait chan syscall.WaitStatus
	err  error
}

type initServer struct {
	cfg initConfig
	// sp starts the commands of a sandbox in a container (at the commands' OOM
	// score); nil in an unisolated one, whose init forks them itself.
	sp      *spawnClient
	mu      sync.Mutex // held while forking and while reaping
	waiters map[int]chan syscall.WaitStatus
}

// start starts a command with files as its fds 0, 1 and 2.
func (in *initServer) start(m spawnMsg, files [3]int) (int, chan syscall.WaitStatus, error) {
	if in.sp != nil {
		return in.sp.spawn(m, files)
	}
	attr := &syscall.ProcAttr{Dir: m.Dir, Env: m.Env, Files: []uintptr{uintptr(files[0]), uintptr(files[1]), uintptr(files[2])},
		Sys: &syscall.SysProcAttr{Setpgid: m.Setpgid, Setsid: m.Setsid, Setctty: m.Setctty}}
	in.mu.Lock()
	defer in.mu.Unlock()
	pid, err := syscall.ForkExec(m.Argv0, m.Argv, attr)
	if err != nil {
		return 0, nil, err
	}
	w := make(chan syscall.WaitStatus, 1)
	in.waiters[pid] = w
	return pid, w, nil
}

// reaper reaps every child and orphan of the sandbox, handing the statuses of the
// commands init started to their waiters. It sweeps once after subscribing to SIGCHLD:
// a child that exited before the subscription (the reaper goroutine can start after
// the first command under load) sent its SIGCHLD to nobody, and would otherwise stay
// a zombie, its exec unanswered, until some other child happened to exit.
func (in *initServer) reaper() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	in.reap()
	for range ch {
		in.reap()
	}
}

// reap collects every exited child without blocking.
func (in *initServer) reap() {
	in.mu.Lock()
	defer in.mu.Unlock()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if in.sp != nil {
			// A command whose spawner was killed before it ended; a spawner itself
			// is restarted by the next command.
			in.sp.reaped(pid, ws)
			continue
		}
		if w, ok := in.waiters[pid]; ok {
			w <- ws
			delete(in.waiters, pid)
		}
	}
}

// lookPath finds name in the PATH of env, as execvp would.
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", name)
}

func (in *initServer) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	fw := &frameWriter{w: c}
	req, err := readRequest(br)
	if err != nil {
		return
	}
	sendExit := func(e exitFrame) {
		b, _ := json.Marshal(e)
		_ = fw.write(frameExit, b)
	}
	switch req.Op {
	case "ping":
		sendExit(exitFrame{Pid: os.Getpid()})
		return
	case "exec":
	default:
		sendExit(exitFrame{Code: -1, Error: "unknown op " + strconv.Quote(req.Op)})
		return
	}
	if len(req.Argv) == 0 {
		sendExit(exitFrame{Code: -1, Error: "argv is empty"})
		return
	}
	argv0, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		sendExit(exitFrame{Code: 127, Error: err.Error()})
		return
	}
	st, err := in.openStreams(req)
	if err != nil {
		sendExit(exitFrame{Code: -1, Error: err.Error()})
		return
	}
	defer st.devNull.Close()
	files, stdinW, stdoutR, stderrR, ptmx, closeAfterStart := st.files, st.stdinW, st.stdoutR, st.stderrR, st.ptmx, st.closeAfterStart
	m := spawnMsg{Argv0: argv0, Argv: req.Argv, Env: req.Env, Dir: req.Cwd, Setpgid: !req.Detach, Setsid: req.Detach}
	if ptmx != nil {
		// Its own session with the pty as controlling terminal (fd 0).
		m.Setpgid, m.Setsid, m.Setctty = false, true, true
	}
	var res spawnRes
	res.pid, res.wait, res.err = in.start(m, [3]int{int(files[0]), int(files[1]), int(files[2])})
	for _, f := range closeAfterStart {
		f.Close()
	}
	if res.err != nil {
		code := 126
		if errors.Is(res.err, syscall.ENOENT) {
			code = 127
		}
		for _, f := range []*os.File{stdinW, stdoutR, stderrR} {
			if f != nil {
				f.Close()
			}
		}
		sendExit(exitFrame{Code: code, Error: fmt.Sprintf("%s: %v", req.Argv[0], res.err)})
		return
	}
	if req.Detach {
		sendExit(exitFrame{Pid: res.pid})
		return
	}
	sendExit(in.follow(br, fw, req, res.pid, res.wait, stdinW, stdoutR, stderrR, ptmx))
}

// follow streams a started command (pid) to the engine: stdin and resizes in, stdout
// and stderr out; it kills the command's group on a timeout or a closed connection,
// and returns its exit.
func (in *initServer) follow(br *bufio.Reader, fw *frameWriter, req ctlRequest, pid int, wait chan syscall.WaitStatus,
	stdinW, stdoutR, stderrR, ptmx *os.File) exitFrame {
	var exitedMu sync.Mutex
	exited := false
	kill := func() {
		exitedMu.Lock()
		defer exitedMu.Unlock()
		if !exited {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	// Frames from the engine: stdin, and the end of the connection (cancel).
	go func() {
		var buf []byte
		for {
			typ, p, err := readFrame(br, buf)
			if err != nil {
				if stdinW != nil && ptmx == nil {
					stdinW.Close()
				}
				kill()
				return
			}
			buf = p[:0]
			switch typ {
			case frameStdin:
				if stdinW != nil {
					_, _ = stdinW.Write(p)
				}
			case frameStdinEOF:
				if stdinW != nil && ptmx == nil {
					stdinW.Close()
				}
			case frameResize:
				if ptmx != nil && len(p) == 4 {
					_ = pty.Setsize(ptmx, &pty.Winsize{Cols: binary.BigEndian.Uint16(p), Rows: binary.BigEndian.Uint16(p[2:])})
				}
			}
		}
	}()
	var copies sync.WaitGroup
	for _, s := range []struct {
		f   *os.File
		typ byte
	}{{stdoutR, frameStdout}, {stderrR, frameStderr}} {
		if s.f == nil {
			continue
		}
		copies.Add(1)
		go func() {
			defer copies.Done()
			_, _ = io.Copy(streamWriter{fw, s.typ}, s.f)
		}()
	}
	timedOut := false
	var timeout <-chan time.Time
	if req.TimeoutMs > 0 {
		t := time.NewTimer(time.Duration(req.TimeoutMs) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	var ws syscall.WaitStatus
	select {
	case ws = <-wait:
	case <-timeout:
		timedOut = true
		kill()
		ws = <-wait
	}
	exitedMu.Lock()
	exited = true
	exitedMu.Unlock()
	// A background child holding the pipes open cannot hold the answer back.
	done := make(chan struct{})
	go func() { copies.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
	stdoutR.Close()
	if stderrR != nil {
		stderrR.Close()
	}
	<-done
	e := exitFrame{Code: ws.ExitStatus(), Pid: pid, TimedOut: timedOut}
	if ws.Signaled() {
		e.Code = 128 + int(ws.Signal())
	}
	if timedOut {
		e.Code = 124
	}
	return e
}
