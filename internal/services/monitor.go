package services

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
	"github.com/proliferate-ai/sandbox-mcp/rules"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// Environment variables of the hidden monitor mode and of every service process.
const (
	// internalEnv selects the monitor mode of the binary when set to monitorMode.
	internalEnv = rules.EnvInternal
	monitorMode = "monitor"
	// ServiceEnv names the service a process belongs to; descendants inherit it.
	ServiceEnv = rules.EnvService
	// instanceEnv is unique per start, so a run's processes are found even
	// after they left the process group. Its value starts with the state
	// dir's prefix (see statePrefix), so the orphans of a state dir are found
	// even when no record names them.
	instanceEnv = rules.EnvServiceInstance
	// monitorEnv marks a monitor with the instance it runs.
	monitorEnv = rules.EnvMonitorInstance
	// monitorName is the monitor's process name (comm and argv[0]), so that
	// `pkill sandbox-mcp` does not take every service's monitor with it.
	monitorName = "mcp-svc-monitor"
)

// InstanceEnv is the environment variable unique to one start of a service.
const InstanceEnv = instanceEnv

// Priorities of service processes relative to the sidecar: a busy dev server
// must not starve the API (health, stop) nor be spared by the OOM killer.
const (
	serviceNice        = 10
	serviceOOMScoreAdj = 500
	sidecarOOMScoreAdj = -500
)

// defaultAckTimeout bounds how long a monitor runs a service that the sidecar
// has not acknowledged as recorded.
const defaultAckTimeout = 30 * time.Second

// monitorSpec is what the sidecar tells a monitor to run.
type monitorSpec struct {
	Name        string   `json:"name"`
	Instance    string   `json:"instance"`
	Command     string   `json:"command"`
	Cwd         string   `json:"cwd"`
	Bash        string   `json:"bash"`
	Env         []string `json:"env"`
	LogPath     string   `json:"logPath"`
	LogMaxBytes int64    `json:"logMaxBytes"`
	LogKeep     int      `json:"logKeep"`
	ExitFile    string   `json:"exitFile"`
	StartedAt   string   `json:"startedAt"`
	StopSignal  int      `json:"stopSignal"`
	StopTimeout int64    `json:"stopTimeoutMs"`
	// AckTimeoutMs is how long the monitor waits for the sidecar's ack.
	AckTimeoutMs int64 `json:"ackTimeoutMs"`
}

// Messages of the monitor handshake, one JSON object a line. The monitor
// writes status messages on fd 3; the sidecar writes the spec and then one
// ack on the monitor's stdin.
const (
	msgStarted = "started" // the service runs: Pid, StartTime, LogOffset, MonitorStartTime
	msgExited  = "exited"  // the service's main process ended: Code
	msgError   = "error"   // the service could not be started or was not acknowledged: Message
	msgAck     = "ack"     // sidecar → monitor: the run is recorded durably
)

// monitorMsg is one line of the handshake.
type monitorMsg struct {
	Type             string `json:"type"`
	PID              int    `json:"pid,omitempty"`
	StartTime        uint64 `json:"startTime,omitempty"`
	LogOffset        int64  `json:"logOffset,omitempty"`
	MonitorStartTime uint64 `json:"monitorStartTime,omitempty"`
	Code             *int   `json:"code,omitempty"`
	Message          string `json:"message,omitempty"`
}

// RunMonitorIfRequested runs the service monitor and exits when the process
// was started as one (environment SANDBOX_MCP_INTERNAL=monitor); otherwise
// it returns at once. Call it first thing in main, and from an init function
// in the tests of every package that starts services, because the manager
// re-executes its own binary (os.Executable) as the monitor.
func RunMonitorIfRequested() {
	if os.Getenv(internalEnv) != monitorMode {
		return
	}
	os.Exit(runMonitor())
}

// runMonitor is the monitor's main. It reads its spec on stdin, starts the
// service, reports `started` on fd 3 and then waits for the sidecar's `ack`:
// without one (stdin closed, or nothing within AckTimeoutMs) the run was never
// recorded, so the monitor stops everything of it and exits. Once
// acknowledged it copies the output to the log, reports `exited` and stops
// what the main process left behind.
func runMonitor() int {
	// The service is forked from this thread, and a thread's nice value is
	// what a child inherits: keep the main goroutine on it, through every
	// step below.
	runtime.LockOSThread()
	rep := &monitorReporter{status: os.NewFile(3, "status")}
	setProcessName(monitorName)
	var spec monitorSpec
	// The spec comes on stdin; the service gets /dev/null instead.
	in := json.NewDecoder(os.Stdin)
	if err := in.Decode(&spec); err != nil {
		rep.fail("decode monitor spec: %v", err)
		return 2
	}
	os.Unsetenv(internalEnv)
	prepareMonitor()
	lw, err := openServiceLog(spec)
	if err != nil {
		rep.fail("%v", err)
		return 1
	}
	defer lw.Close()
	offset := lw.Size()
	pid, out, err := forkService(spec, lw)
	if err != nil {
		rep.fail("%v", err)
		return 1
	}
	var start uint64
	if st, err := procfs.ReadStat(pid); err == nil {
		start = st.Start
	}
	self := target{instance: spec.Instance, monitor: os.Getpid(), monStart: selfStart()}
	run := self
	run.pgid, run.pgidStart = pid, start
	rep.report(monitorMsg{Type: msgStarted, PID: pid, StartTime: start, LogOffset: offset, MonitorStartTime: self.monStart})
	copied := copyOutput(out, lw)
	if err := awaitAck(in, time.Duration(spec.AckTimeoutMs)*time.Millisecond); err != nil {
		// Nobody recorded this run, so nobody could ever stop it: stop it now.
		fmt.Fprintf(lw, "sandbox-mcp: %v; stopping the service\n", err)
		_ = killTree(context.Background(), run, syscall.SIGKILL, 0)
		reapAll()
		rep.fail("%v", err)
		return 3
	}
	reapService(spec, pid, self, lw, rep, copied)
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return 0
}

// exitDrain is how long the exit report waits for the service's last output to reach
// the log: a log read once the status says stopped then holds all the main process
// printed, unless something it left behind still holds the pipe.
const exitDrain = 250 * time.Millisecond

// monitorReporter writes the monitor's status messages on fd 3.
type monitorReporter struct {
	status *os.File
	mu     sync.Mutex
}

func (r *monitorReporter) report(msg monitorMsg) {
	if r.status == nil {
		return
	}
	b, _ := json.Marshal(msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	// The sidecar may be gone; the exit file is the durable record.
	_, _ = r.status.Write(append(b, '\n'))
}

func (r *monitorReporter) fail(format string, args ...any) {
	r.report(monitorMsg{Type: msgError, Message: fmt.Sprintf(format, args...)})
}

// prepareMonitor sets up the monitor's process before it forks the service,
// which inherits the priority set here.
func prepareMonitor() {
	// The monitor must outlive whatever signals reach the sidecar's session
	// and only ends when the service has nothing left.
	// Caught, not ignored: an ignored disposition would be inherited by the service.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	// The status pipe must not leak into the service.
	syscall.CloseOnExec(3)
	// Orphaned descendants are re-parented to us, so they are reaped and
	// found by the sidecar even when they left the process group.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	// Lower the service's priority (inherited through fork): raising both is
	// always permitted. The monitor shares the OOM score; it is tiny, and a
	// monitor that dies is noticed by the sidecar, which then stops the run.
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(serviceOOMScoreAdj)), 0)
	_ = syscall.Setpriority(syscall.PRIO_PROCESS, 0, serviceNice) // this thread only
}

// openServiceLog opens the service's log and appends the marker of this
// start, so the log shows where each run begins.
func openServiceLog(spec monitorSpec) (*rotatingWriter, error) {
	lw, err := openRotating(spec.LogPath, spec.LogMaxBytes, spec.LogKeep)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	marker := fmt.Sprintf("\n=== Service %q started at %s ===\nCommand: %s\nWorking directory: %s\n\n",
		spec.Name, spec.StartedAt, spec.Command, spec.Cwd)
	if _, err := io.WriteString(lw, marker); err != nil {
		lw.Close()
		return nil, fmt.Errorf("write log: %w", err)
	}
	return lw, nil
}

// forkService starts `bash -c command` in a process group of its own, stdin
// on /dev/null and stdout and stderr on a pipe, and returns its pid and the
// pipe's read end. It must run on the locked thread: the child inherits its
// nice value. A failed start is also written to the log, where the user looks.
func forkService(spec monitorSpec, log io.Writer) (int, *os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, nil, fmt.Errorf("create pipe: %w", err)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		r.Close()
		w.Close()
		return 0, nil, fmt.Errorf("open %s: %w", os.DevNull, err)
	}
	pid, err := syscall.ForkExec(spec.Bash, []string{"bash", "-c", spec.Command}, &syscall.ProcAttr{
		Dir:   spec.Cwd,
		Env:   spec.Env,
		Files: []uintptr{devnull.Fd(), w.Fd(), w.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	})
	devnull.Close()
	w.Close()
	if err != nil {
		r.Close()
		fmt.Fprintf(log, "sandbox-mcp: start %q: %v\n", spec.Command, err)
		return 0, nil, fmt.Errorf("start bash: %w", err)
	}
	return pid, r, nil
}

// copyOutput copies the service's output to the log until every writer of
// the pipe is gone; the channel closes then.
func copyOutput(r *os.File, lw io.Writer) <-chan struct{} {
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		// Keep draining even when the log cannot be written (disk full):
		// a service blocked on a full pipe would hang.
		buf := make([]byte, 32<<10)
		cw := newCharWriter(lw)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = cw.Write(buf[:n])
			}
			if err != nil {
				_ = cw.Finish()
				return
			}
		}
	}()
	return copied
}

// reapService reaps children until none is left. When the main process pid
// ends it records its exit code, reports it once its output is in the log (or
// after exitDrain) and stops what it left behind; self is the monitor's part of
// the target to stop.
func reapService(spec monitorSpec, pid int, self target, log io.Writer, rep *monitorReporter, copied <-chan struct{}) {
	var reaped sync.WaitGroup
	defer reaped.Wait()
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // ECHILD: nothing of the service is left
		}
		if wpid != pid {
			continue
		}
		code := exitCode(ws)
		if err := atomicfile.WriteFile(spec.ExitFile, []byte(strconv.Itoa(code)+"\n"), 0o644); err != nil {
			fmt.Fprintf(log, "sandbox-mcp: record exit code: %v\n", err)
		}
		select {
		case <-copied:
		case <-time.After(exitDrain):
		}
		rep.report(monitorMsg{Type: msgExited, Code: &code})
		// The service is its main process: what it left behind goes with it.
		// Zombies of killed children are reaped by this loop afterwards.
		// The leader is reaped, so pgidStart stays 0: if its pid is recycled
		// the group is left alone.
		reaped.Add(1)
		go func() {
			defer reaped.Done()
			sig := syscall.Signal(spec.StopSignal)
			if sig == 0 {
				sig = syscall.SIGTERM
			}
			t := self
			t.pgid = pid
			_ = killTree(context.Background(), t, sig, time.Duration(spec.StopTimeout)*time.Millisecond)
		}()
	}
}

// awaitAck waits for the sidecar's ack on the monitor's stdin.
func awaitAck(in *json.Decoder, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = defaultAckTimeout
	}
	got := make(chan error, 1)
	go func() {
		var msg monitorMsg
		err := in.Decode(&msg)
		switch {
		case err != nil:
			err = fmt.Errorf("sidecar went away before recording the run (%v)", err)
		case msg.Type != msgAck:
			err = fmt.Errorf("sidecar sent %q instead of an ack", msg.Type)
		}
		got <- err
	}()
	select {
	case err := <-got:
		return err
	case <-time.After(timeout):
		return fmt.Errorf("no ack from the sidecar within %v", timeout)
	}
}

// reapAll reaps every child left, without blocking.
func reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}

// setProcessName sets the process's comm (what ps -o comm, top and pkill
// match): /proc/self/comm is the main thread's, whichever thread writes it.
func setProcessName(name string) {
	_ = os.WriteFile("/proc/self/comm", []byte(name), 0)
}

// readMonitorMsg reads one line of the monitor's status pipe.
func readMonitorMsg(br *bufio.Reader) (monitorMsg, error) {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return monitorMsg{}, err
	}
	var msg monitorMsg
	if err := json.Unmarshal(line, &msg); err != nil {
		return monitorMsg{}, fmt.Errorf("bad monitor message %q: %w", line, err)
	}
	return msg, nil
}

const prSetChildSubreaper = 36

func selfStart() uint64 {
	st, err := procfs.ReadStat(os.Getpid())
	if err != nil {
		return 0
	}
	return st.Start
}

// exitCode maps a wait status to a shell-style exit code (128+signal when killed).
func exitCode(ws syscall.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return -1
}

// rotatingWriter appends to a log file and rotates it at maxBytes:
// name.log.(keep-1) → name.log.keep … name.log → name.log.1, then a new
// name.log. Once the new file exists nothing more is written to the old one,
// so a reader that drains the renamed file and then switches sees every byte once.
type rotatingWriter struct {
	path     string
	maxBytes int64
	keep     int
	f        *os.File
	size     int64
}

func openRotating(path string, maxBytes int64, keep int) (*rotatingWriter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	w := &rotatingWriter{path: path, maxBytes: maxBytes, keep: max(keep, 1)}
	if err := w.open(); err != nil {
		return nil, err
	}
	if w.maxBytes > 0 && w.size >= w.maxBytes {
		if err := w.rotate(); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func (w *rotatingWriter) open() error {
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	w.f, w.size = f, fi.Size()
	return nil
}

// Size is the current file's size.
func (w *rotatingWriter) Size() int64 { return w.size }

func (w *rotatingWriter) Write(p []byte) (int, error) {
	if w.f == nil {
		// A failed rotation left no file open: try again.
		if err := w.open(); err != nil {
			return 0, err
		}
	}
	n, err := w.f.Write(p)
	w.size += int64(n)
	if err != nil {
		return n, err
	}
	if w.maxBytes > 0 && w.size >= w.maxBytes {
		if err := w.rotate(); err != nil {
			return n, err
		}
	}
	return n, nil
}

func (w *rotatingWriter) rotate() error {
	w.f.Close()
	w.f = nil
	for i := w.keep - 1; i >= 1; i-- {
		_ = os.Rename(w.path+"."+strconv.Itoa(i), w.path+"."+strconv.Itoa(i+1))
	}
	_ = os.Rename(w.path, w.path+".1")
	return w.open()
}

func (w *rotatingWriter) Close() error {
	if w.f == nil {
		return nil
	}
	return w.f.Close()
}
