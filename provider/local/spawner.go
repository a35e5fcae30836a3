package local

// The spawner: the one process of a sandbox that starts commands, a child of init
// inside the container. It exists for the OOM killer: init runs at an OOM score of
// -1000 (never the victim), and a child inherits its parent's score, so the commands
// are forked by a process that raised its own to oci.CmdOOMScoreAdj first. The isolation
// (user namespace, capabilities, seccomp) is the runtime's, inherited from init.
//
// Init sends each command over a socket pair (fd 3 of the spawner): a length-prefixed
// JSON spawnMsg whose header carries the command's three standard descriptors
// (SCM_RIGHTS). The spawner forks it and answers with its pid; when a command exits it
// sends its wait status. Orphans re-parent to init, which reaps them.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/local/oci"
)

// spawnMsg is one command for the spawner.
type spawnMsg struct {
	Argv0   string   `json:"argv0"`
	Argv    []string `json:"argv"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	Setpgid bool     `json:"setpgid,omitempty"`
	Setsid  bool     `json:"setsid,omitempty"`
	// Setctty makes fd 0 the controlling terminal (with Setsid).
	Setctty bool `json:"setctty,omitempty"`
}

// spawnAns is the spawner's answer: kind 'p' (started: Pid, or Errno) or 'x' (Pid
// exited with Status).
type spawnAns struct {
	Kind   byte `json:"k"`
	Pid    int  `json:"pid,omitempty"`
	Errno  int  `json:"errno,omitempty"`
	Status int  `json:"status,omitempty"`
}

// maxSpawnMsg bounds one message (argv and env of a command).
const maxSpawnMsg = 4 << 20

// spawnClient is init's side of the spawner. A spawner can be killed from inside
// (root there may signal every process of its user namespace: `kill -9 -1`); the next
// command starts a new one, in a new user namespace with the same mapping. The
// commands of a dead spawner re-parent to init, whose reaper hands their statuses on
// (exited).
type spawnClient struct {
	mu   sync.Mutex // one command at a time; guards conn
	conn *spawnConn
	wmu  sync.Mutex
	// waiters are the commands started, by pid, until their exit.
	waiters map[int]chan syscall.WaitStatus
}

// spawnConn is one spawner process.
type spawnConn struct {
	fd, pid int
	replies chan spawnReply
	done    chan struct{} // closed when its answers end
	dead    bool
}

func (s *spawnConn) gone() bool {
	select {
	case <-s.done:
		return true
	default:
		return s.dead
	}
}

func newSpawnClient() *spawnClient {
	return &spawnClient{waiters: map[int]chan syscall.WaitStatus{}}
}

// start starts a spawner (this binary in its spawner mode) and returns its pid.
func (c *spawnClient) start() (int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	child := os.NewFile(uintptr(fds[1]), "spawner")
	defer child.Close()
	devNull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		unix.Close(fds[0])
		return 0, err
	}
	defer devNull.Close()
	attr := &syscall.ProcAttr{
		Env:   []string{initEnv + "=" + modeSpawner},
		Files: []uintptr{devNull.Fd(), devNull.Fd(), os.Stderr.Fd(), child.Fd()},
	}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"sandbox-spawner"}, attr)
	if err != nil {
		unix.Close(fds[0])
		return 0, fmt.Errorf("start the spawner: %w", err)
	}
	conn := &spawnConn{fd: fds[0], pid: pid, replies: make(chan spawnReply, 1), done: make(chan struct{})}
	c.conn = conn
	go c.read(conn)
	return pid, nil
}

// reaped hands the status of a command to its waiter.
func (c *spawnClient) reaped(pid int, ws syscall.WaitStatus) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if w, ok := c.waiters[pid]; ok {
		w <- ws
		delete(c.waiters, pid)
	}
}

// spawn starts a command with files as its fds 0, 1 and 2; the channel gets its wait
// status.
func (c *spawnClient) spawn(m spawnMsg, files [3]int) (int, chan syscall.WaitStatus, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return 0, nil, err
	}
	if len(b) > maxSpawnMsg {
		return 0, nil, errors.New("the command and its environment are too large")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var conn *spawnConn
	for try := 0; ; try++ {
		if c.conn == nil || c.conn.gone() {
			if c.conn != nil {
				unix.Close(c.conn.fd)
			}
			if _, err := c.start(); err != nil {
				return 0, nil, err
			}
		}
		conn = c.conn
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
		err = unix.Sendmsg(conn.fd, hdr[:], unix.UnixRights(files[:]...), nil, 0)
		if err == nil {
			break
		}
		// Nothing was started: a spawner that died since its last command is
		// replaced once.
		conn.dead = true
		if try == 1 {
			return 0, nil, fmt.Errorf("send to the spawner: %w", err)
		}
	}
	if err := writeAll(conn.fd, b); err != nil {
		conn.dead = true
		return 0, nil, fmt.Errorf("send to the spawner: %w", err)
	}
	r, ok := <-conn.replies
	if !ok {
		conn.dead = true
		return 0, nil, errors.New("the spawner is gone")
	}
	if r.Errno != 0 {
		return 0, nil, syscall.Errno(r.Errno)
	}
	return r.Pid, r.wait, nil
}

// spawnReply is a start answer with the waiter registered for it (its exit can be
// delivered before spawn reads the answer).
type spawnReply struct {
	spawnAns
	wait chan syscall.WaitStatus
}

// read dispatches a spawner's answers; a waiter is registered before its command's
// exit can arrive (the spawner answers a start before it reaps).
func (c *spawnClient) read(conn *spawnConn) {
	f := fdReader(conn.fd)
	for {
		var a spawnAns
		if err := readMsg(f, &a); err != nil {
			close(conn.done)
			close(conn.replies)
			return
		}
		switch a.Kind {
		case 'p':
			r := spawnReply{spawnAns: a}
			if a.Errno == 0 {
				r.wait = make(chan syscall.WaitStatus, 1)
				c.wmu.Lock()
				c.waiters[a.Pid] = r.wait
				c.wmu.Unlock()
			}
			conn.replies <- r
		case 'x':
			c.reaped(a.Pid, syscall.WaitStatus(a.Status))
		}
	}
}

// fdReader reads a descriptor it does not own (an *os.File would close it when
// collected).
type fdReader int

func (r fdReader) Read(b []byte) (int, error) {
	for {
		n, err := unix.Read(int(r), b)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 && len(b) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func writeAll(fd int, b []byte) error {
	for len(b) > 0 {
		n, err := unix.Write(fd, b)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// readMsg reads one length-prefixed JSON message.
func readMsg(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxSpawnMsg {
		return fmt.Errorf("message of %d bytes is too large", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeMsg(fd int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	out := make([]byte, 4, 4+len(b))
	binary.BigEndian.PutUint32(out, uint32(len(b)))
	return writeAll(fd, append(out, b...))
}

// spawnerMain is the spawner process; it returns when init is gone.
func spawnerMain() int {
	_ = os.WriteFile("/proc/self/comm", []byte("sandbox-spawner"), 0)
	// The commands' OOM score, inherited by every one: raising one's own score needs
	// no privilege, and a spawner that cannot is refused rather than run commands
	// that could make init the victim.
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(oci.CmdOOMScoreAdj)), 0); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox spawner: oom_score_adj: %v\n", err)
		return 1
	}
	// Not dumpable: no process inside can read its descriptors or memory.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox spawner: prctl: %v\n", err)
		return 1
	}
	const sock = 3
	var mu sync.Mutex // held while forking and while reaping
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGCHLD)
		for {
			mu.Lock()
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if err == syscall.EINTR {
					continue
				}
				if pid <= 0 || err != nil {
					break
				}
				_ = writeMsg(sock, spawnAns{Kind: 'x', Pid: pid, Status: int(ws)})
			}
			mu.Unlock()
			<-ch
		}
	}()
	for {
		m, fds, err := recvSpawn(sock)
		if err != nil {
			return 0
		}
		attr := &syscall.ProcAttr{Dir: m.Dir, Env: m.Env, Files: []uintptr{uintptr(fds[0]), uintptr(fds[1]), uintptr(fds[2])},
			Sys: &syscall.SysProcAttr{Setpgid: m.Setpgid, Setsid: m.Setsid, Setctty: m.Setctty}}
		mu.Lock()
		pid, err := syscall.ForkExec(m.Argv0, m.Argv, attr)
		a := spawnAns{Kind: 'p', Pid: pid}
		if err != nil {
			a.Pid, a.Errno = 0, int(errnoOf(err))
		}
		werr := writeMsg(sock, a)
		mu.Unlock()
		for _, fd := range fds {
			unix.Close(fd)
		}
		if werr != nil {
			return 0
		}
	}
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EINVAL
}

// recvSpawn reads one spawnMsg and its three descriptors.
func recvSpawn(sock int) (spawnMsg, [3]int, error) {
	var m spawnMsg
	var fds [3]int
	var hdr [4]byte
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := unix.Recvmsg(sock, hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
	for err == unix.EINTR {
		n, oobn, _, _, err = unix.Recvmsg(sock, hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
	}
	if err != nil || n == 0 {
		return m, fds, io.EOF
	}
	got := 0
	if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, scm := range scms {
			if rights, err := unix.ParseUnixRights(&scm); err == nil {
				for _, fd := range rights {
					if got < 3 {
						fds[got] = fd
						got++
					} else {
						unix.Close(fd)
					}
				}
			}
		}
	}
	f := fdReader(sock)
	if n < 4 {
		if _, err := io.ReadFull(f, hdr[n:]); err != nil {
			return m, fds, err
		}
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if got != 3 || size > maxSpawnMsg {
		return m, fds, errors.New("bad spawn message")
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return m, fds, err
	}
	return m, fds, json.Unmarshal(b, &m)
}
