package terminal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

var errExists = errors.New("session exists")

// session is one shell on a PTY, its output ring and its viewers.
type session struct {
	m       *Manager
	id      string
	v2      bool
	cmd     *exec.Cmd
	pty     *os.File
	pid     int
	created time.Time

	mu         sync.Mutex
	ring       *ring
	viewers    map[*viewer]struct{}
	cols, rows uint16
	lastActive time.Time
	exitCode   int
	grace      *time.Timer
	// detachedAt is when the last viewer left; zero while a viewer is
	// attached or before the first one came.
	detachedAt time.Time

	killOnce sync.Once
	// inputc carries keystrokes to writeLoop.
	inputc chan []byte
	// space is signalled when a viewer advances, for publish to retry.
	space chan struct{}
	// killed is closed to ask run to end the shell.
	killed chan struct{}
	// exiting is closed when the shell has been reaped.
	exiting chan struct{}
	// done is closed when the shell and its session are gone, every byte of
	// output is in the ring, exitCode is set and the id is free.
	done chan struct{}
}

// viewer is one connection attached to a session. pos is owned by the
// connection's writer goroutine.
type viewer struct {
	wake    chan struct{}
	v2      bool
	resumed bool
	// start is where this viewer's output starts; live is the end of the
	// output when it attached: bytes in [start, live) are a replay.
	start, live int64

	// Guarded by session.mu.
	pos int64
	// lagging is set when the viewer stalled the output for StallTimeout;
	// publish no longer waits for it until it has caught up.
	lagging bool
	// blockedSince is when publish started waiting for this viewer.
	blockedSince time.Time
}

// spawn starts a shell for session id at cols×rows in the room r reserved
// and registers it.
func (m *Manager) spawn(id string, cols, rows uint16, v2 bool, r *Reservation) (*session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errClosed
	}
	if _, ok := m.sessions[id]; ok {
		return nil, errExists
	}
	if r.used {
		// Already spent (cannot happen: one reservation, one spawn).
		return nil, ErrTooManySessions
	}
	cmd := exec.Command(m.opts.Command[0], m.opts.Command[1:]...)
	cmd.Dir = m.opts.Dir
	cmd.Env = m.opts.Env
	// StartWithSize makes the shell a session leader with the PTY as its
	// controlling terminal, so every process it starts can be found by its
	// session id.
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: cols, Rows: rows})
	if err != nil {
		return nil, fmt.Errorf("start shell: %w", err)
	}
	now := time.Now()
	s := &session{
		m: m, id: id, v2: v2, cmd: cmd, pty: f, pid: cmd.Process.Pid, created: now,
		ring: newRing(m.opts.RingSize), viewers: make(map[*viewer]struct{}),
		cols: cols, rows: rows, lastActive: now,
		inputc: make(chan []byte, 4), space: make(chan struct{}, 1), killed: make(chan struct{}), exiting: make(chan struct{}), done: make(chan struct{}),
	}
	m.sessions[id] = s
	r.useLocked()
	m.wg.Add(1)
	go s.run()
	m.log.Info("terminal session started", "session", id, "pid", s.pid, "cols", cols, "rows", rows, "v2", v2)
	return s, nil
}

// run owns the shell: it reads the PTY, reaps the shell, kills what the
// shell left behind in its session and then marks the session done.
func (s *session) run() {
	defer s.m.wg.Done()
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		s.readLoop()
	}()
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		s.writeLoop()
	}()
	waitc := make(chan struct{})
	go func() {
		defer close(waitc)
		_ = s.cmd.Wait()
	}()
	kg := s.m.opts.KillGrace
	select {
	case <-waitc:
	case <-s.killed:
		// Closing the master hangs up the terminal (SIGHUP to the shell, which
		// passes it to its jobs); what ignores it is killed after the grace.
		_ = s.pty.Close()
		signalSession(s.pid, syscall.SIGHUP)
		select {
		case <-waitc:
		case <-time.After(kg):
			signalSession(s.pid, syscall.SIGKILL)
			<-waitc
		}
	}
	close(s.exiting)
	code := exitCode(s.cmd.ProcessState)
	// Jobs the shell left in its session (sleep 1000 &, nohup, other process
	// groups) still hold the PTY open; end them so nothing leaks.
	killSession(s.pid, kg)
	// The read loop ends with EIO once no process holds the PTY; a process
	// that left the session could keep it open, so do not wait forever.
	select {
	case <-readDone:
	case <-time.After(2 * time.Second):
	}
	// Closing the PTY also ends a write blocked on a full input buffer.
	_ = s.pty.Close()
	<-readDone
	<-writeDone

	s.mu.Lock()
	s.exitCode = code
	if s.grace != nil {
		s.grace.Stop()
	}
	s.mu.Unlock()
	s.m.mu.Lock()
	if s.m.sessions[s.id] == s {
		delete(s.m.sessions, s.id)
	}
	s.m.mu.Unlock()
	s.m.log.Info("terminal session ended", "session", s.id, "pid", s.pid, "exit_code", code)
	close(s.done)
}

// exitCode is the shell's exit status, 128+n for a shell killed by signal n.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// bulkRead is the size of a PTY read that signals a flood: the line
// discipline hands out at most 4 KiB per read, so a read this large means
// more is probably waiting.
const bulkRead = 2048

// readLoop is the one reader of the PTY. It never waits for a viewer: output
// goes into the ring and viewers are woken. During a flood it takes in what
// is already waiting (up to 64 KiB) before publishing, so one wakeup and one
// frame carry many PTY reads; a keystroke's echo (a small read) is published
// at once.
func (s *session) readLoop() {
	buf := make([]byte, 64<<10)
	raw, rawErr := s.pty.SyscallConn()
	carry := 0
	for {
		n, err := s.pty.Read(buf[carry:])
		total := carry + n
		for err == nil && rawErr == nil && n >= bulkRead && len(buf)-total >= bulkRead {
			if n = readNow(raw, buf[total:]); n <= 0 {
				break
			}
			total += n
		}
		if total > carry {
			// Hold back a character cut by the read so every chunk in the
			// ring ends on a character boundary.
			k := completePrefix(buf[:total])
			s.publish(buf[:k])
			carry = copy(buf, buf[k:total])
		}
		if err != nil {
			// EIO when the last process holding the PTY is gone, ErrClosed
			// after a kill: both are the end of the output.
			if carry > 0 {
				s.publish(buf[:carry])
			}
			return
		}
	}
}

// readNow reads what is waiting on the PTY without waiting for more; 0 when
// nothing is (or on any error, which the next blocking read reports). It
// polls first: the PTY's descriptor may be in blocking mode.
func readNow(raw syscall.RawConn, p []byte) int {
	n := 0
	_ = raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if k, err := unix.Poll(fds, 0); err != nil || k == 0 || fds[0].Revents&unix.POLLIN == 0 {
			return
		}
		if m, err := syscall.Read(int(fd), p); err == nil {
			n = m
		}
	})
	return n
}

// publish puts p into the ring. Output goes at the pace of the slowest
// viewer that keeps making progress: when writing p would overwrite bytes a
// viewer has not sent yet, publish waits for it, but for at most StallTimeout
// without progress; then that viewer is left behind (it skips to the oldest
// byte kept) and publish goes on. With no viewer the ring just overwrites.
func (s *session) publish(p []byte) {
	if len(p) == 0 {
		return
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		s.mu.Lock()
		newStart := s.ring.end + int64(len(p)) - int64(len(s.ring.buf))
		now := time.Now()
		var wait time.Duration
		for v := range s.viewers {
			if v.lagging || v.pos >= newStart {
				continue
			}
			if v.blockedSince.IsZero() {
				v.blockedSince = now
			}
			left := s.m.opts.StallTimeout - now.Sub(v.blockedSince)
			if left <= 0 {
				v.lagging = true
				continue
			}
			wait = max(wait, left)
		}
		if wait == 0 {
			s.ring.write(p)
			s.lastActive = now
			for v := range s.viewers {
				select {
				case v.wake <- struct{}{}:
				default:
				}
			}
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-s.space:
		case <-timer.C:
		case <-s.killed:
			// Nobody waits for output of a killed session.
			s.mu.Lock()
			for v := range s.viewers {
				v.lagging = true
			}
			s.mu.Unlock()
		}
	}
}

// kill asks the session to end its shell and everything it started.
func (s *session) kill(reason string) {
	s.killOnce.Do(func() {
		s.m.log.Info("terminal session killed", "session", s.id, "pid", s.pid, "reason", reason)
		close(s.killed)
	})
}

// attach adds a viewer that wants output from offset on (clamped to what
// the ring keeps, starting at a character boundary).
func (s *session) attach(offset int64, v2 bool) *viewer {
	s.mu.Lock()
	defer s.mu.Unlock()
	offset = min(max(offset, 0), s.ring.end)
	if offset < s.ring.start() {
		offset = s.ring.boundary(s.ring.start())
	}
	v := &viewer{wake: make(chan struct{}, 1), v2: v2, start: offset, live: s.ring.end, pos: offset}
	s.viewers[v] = struct{}{}
	s.detachedAt = time.Time{}
	if s.grace != nil {
		s.grace.Stop()
		s.grace = nil
	}
	s.lastActive = time.Now()
	return v
}

// detach removes v; a v2 session left without viewers is killed after the
// grace period unless someone attaches again.
func (s *session) detach(v *viewer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.viewers, v)
	if !s.v2 || len(s.viewers) > 0 {
		return
	}
	select {
	case <-s.exiting:
		return
	default:
	}
	if s.grace != nil {
		s.grace.Stop()
	}
	s.detachedAt = time.Now()
	var t *time.Timer
	t = time.AfterFunc(s.m.opts.Grace, func() {
		s.mu.Lock()
		expired := s.grace == t && len(s.viewers) == 0
		s.mu.Unlock()
		if expired {
			s.kill("no viewer within the grace period")
		}
	})
	s.grace = t
}

// input queues keystrokes for the shell. It waits while the shell does not
// read its input (the PTY's input buffer is full), but never past ctx, so a
// connection that goes away is never stuck behind a blocked write.
func (s *session) input(ctx context.Context, p []byte) {
	if len(p) == 0 {
		return
	}
	s.mu.Lock()
	s.lastActive = time.Now()
	s.mu.Unlock()
	select {
	case s.inputc <- p:
	case <-ctx.Done():
	case <-s.exiting:
	}
}

// writeLoop is the one writer of the PTY.
func (s *session) writeLoop() {
	for {
		select {
		case p := <-s.inputc:
			// An error means the shell is gone; viewers learn it from done.
			_, _ = s.pty.Write(p)
		case <-s.exiting:
			return
		}
	}
}

func (s *session) resize(cols, rows uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := pty.Setsize(s.pty, &pty.Winsize{Cols: cols, Rows: rows}); err != nil {
		return
	}
	s.cols, s.rows = cols, rows
}

func (s *session) info() apitype.TerminalSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	proto := "v1"
	if s.v2 {
		proto = "v2"
	}
	return apitype.TerminalSession{
		ID:             s.id,
		PID:            s.pid,
		Protocol:       proto,
		Cols:           int(s.cols),
		Rows:           int(s.rows),
		Clients:        len(s.viewers),
		CreatedAt:      s.created.UnixMilli(),
		LastActivityAt: s.lastActive.UnixMilli(),
		OutputBytes:    s.ring.end,
	}
}
