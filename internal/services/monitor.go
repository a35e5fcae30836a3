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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Environment variables of the hidden monitor mode and of every service process.
const (
	// internalEnv selects the monitor mode of the binary when set to "logwriter".
	internalEnv = "SANDBOX_MCP_INTERNAL"
	// ServiceEnv names the service a process belongs to; descendants inherit it.
	ServiceEnv = "SANDBOX_MCP_SERVICE"
	// instanceEnv is unique per start, so a run's processes are found even
	// after they left the process group.
	instanceEnv = "SANDBOX_MCP_SERVICE_INSTANCE"
)

// InstanceEnv is the environment variable unique to one start of a service.
const InstanceEnv = instanceEnv

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
}

// RunMonitorIfRequested runs the service monitor and exits when the process
// was started as one (environment SANDBOX_MCP_INTERNAL=logwriter); otherwise
// it returns at once. Call it first thing in main, and from an init function
// in the tests of every package that starts services, because the manager
// re-executes its own binary (os.Executable) as the monitor.
func RunMonitorIfRequested() {
	if os.Getenv(internalEnv) != "logwriter" {
		return
	}
	os.Exit(runMonitor())
}

// runMonitor is the monitor's main. It reports on fd 3:
//
//	started <pid> <starttime> <log offset after the marker>
//	exited <code>
//
// or `error <message>` when the command could not be started.
func runMonitor() int {
	status := os.NewFile(3, "status")
	report := func(format string, args ...any) {
		if status != nil {
			// The sidecar may be gone; the exit file is the durable record.
			_, _ = fmt.Fprintf(status, format+"\n", args...)
		}
	}
	var spec monitorSpec
	// The spec comes on stdin; the service gets /dev/null instead.
	if err := json.NewDecoder(os.Stdin).Decode(&spec); err != nil {
		report("error decode monitor spec: %v", err)
		return 2
	}
	os.Unsetenv(internalEnv)
	// The monitor must outlive whatever signals reach the sidecar's session
	// and only ends when the service has nothing left.
	// Caught, not ignored: an ignored disposition would be inherited by the service.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	// The status pipe must not leak into the service.
	syscall.CloseOnExec(3)
	// Orphaned descendants are re-parented to us, so they are reaped and
	// found by the sidecar even when they left the process group.
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)

	lw, err := openRotating(spec.LogPath, spec.LogMaxBytes, spec.LogKeep)
	if err != nil {
		report("error open log: %v", err)
		return 1
	}
	defer lw.Close()
	marker := fmt.Sprintf("\n=== Service %q started at %s ===\nCommand: %s\nWorking directory: %s\n\n",
		spec.Name, spec.StartedAt, spec.Command, spec.Cwd)
	if _, err := io.WriteString(lw, marker); err != nil {
		report("error write log: %v", err)
		return 1
	}
	offset := lw.Size()

	r, w, err := os.Pipe()
	if err != nil {
		report("error create pipe: %v", err)
		return 1
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		report("error open %s: %v", os.DevNull, err)
		return 1
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
		fmt.Fprintf(lw, "sandbox-mcp: start %q: %v\n", spec.Command, err)
		report("error start bash: %v", err)
		return 1
	}
	var start uint64
	if st, err := readStat(pid); err == nil {
		start = st.start
	}
	report("started %d %d %d", pid, start, offset)

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
	var reaped sync.WaitGroup

	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			break // ECHILD: nothing of the service is left
		}
		if wpid != pid {
			continue
		}
		code := exitCode(ws)
		if err := writeFileAtomic(spec.ExitFile, []byte(strconv.Itoa(code)+"\n"), 0o644); err != nil {
			fmt.Fprintf(lw, "sandbox-mcp: record exit code: %v\n", err)
		}
		report("exited %d", code)
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
			t := target{pgid: pid, instance: spec.Instance, monitor: os.Getpid(), monStart: selfStart()}
			_ = killTree(context.Background(), t, sig, time.Duration(spec.StopTimeout)*time.Millisecond)
		}()
	}
	reaped.Wait()
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	return 0
}

const prSetChildSubreaper = 36

func selfStart() uint64 {
	st, err := readStat(os.Getpid())
	if err != nil {
		return 0
	}
	return st.start
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

// readStatusLine parses one line of the monitor's status pipe.
func readStatusLine(br *bufio.Reader) (kind string, fields []string, err error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return "", nil, err
	}
	line = strings.TrimSuffix(line, "\n")
	kind, rest, _ := strings.Cut(line, " ")
	if kind == "error" {
		return kind, []string{rest}, nil
	}
	return kind, strings.Fields(rest), nil
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
