package local

// The init of a sandbox: PID 1 inside the runtime's container (the engine's own binary,
// bound read-only at oci.InitPath, in its container mode), or, for an unisolated sandbox,
// a host process. It serves the control socket (exec) and reaps every process of the
// sandbox. When it dies the kernel kills everything in its pid namespace.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/local/netns"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/rootfs"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
)

// initConfig is what init gets: on stdin inside a container (from the shim), on fd 3
// as a host process (unisolated). The shim builds the root from its rootfs.Config.
type initConfig struct {
	rootfs.Config
	Isolated bool `json:"isolated"`
	NetNS    bool `json:"netns"`
	// Tunnels are the sandbox ports served by the host listeners (the shim's fds 5, 6,
	// …; an unisolated init's the same).
	Tunnels []int `json:"tunnels,omitempty"`
	// DeadlineMs ends the sandbox (exit 124) at this Unix time in ms; 0 means never.
	DeadlineMs int64 `json:"deadlineMs,omitempty"`
}

// Names of a sandbox's directory entries on the host.
const (
	dirHome    = rootfs.DirHome // the writable directories are on the sandbox's disk
	dirTmp     = rootfs.DirTmp
	dirVarTmp  = rootfs.DirVarTmp
	dirRun     = rootfs.DirRun
	fileCtl    = "control.sock"
	fileInitLg = "init.log"
)

// sandboxInit is the init of an unisolated sandbox, a host process; it returns only
// on a failed start.
func sandboxInit() int {
	_ = os.WriteFile("/proc/self/comm", []byte("sandbox-init"), 0) // what ps shows
	cfgFile, ready := os.NewFile(3, "config"), os.NewFile(4, "ready")
	var cfg initConfig
	err := json.NewDecoder(io.LimitReader(cfgFile, maxSpawnMsg)).Decode(&cfg)
	cfgFile.Close()
	fail := func(err error) int {
		fmt.Fprintf(ready, "error: %v\n", err)
		fmt.Fprintf(os.Stderr, "sandbox init: %v\n", err)
		return 1
	}
	if err != nil {
		return fail(fmt.Errorf("read config: %w", err))
	}
	keep := []int{4}
	for i := range cfg.Tunnels {
		keep = append(keep, 5+i)
	}
	if err := closeFdsFrom(3, keep...); err != nil {
		return fail(err)
	}
	dirFd, err := unix.Open(cfg.Dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	sockPath := "/proc/self/fd/" + strconv.Itoa(dirFd) + "/" + fileCtl
	_ = os.Remove(sockPath)
	ln, err := net.Listen("unix", sockPath)
	if err != nil {
		return fail(fmt.Errorf("control socket: %w", err))
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	// Signals from inside the sandbox do not end it; the engine ends it with SIGKILL.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	in := &initServer{cfg: cfg, waiters: map[int]chan syscall.WaitStatus{}}
	go in.reaper()
	for i, port := range cfg.Tunnels {
		f := os.NewFile(uintptr(5+i), "tunnel")
		tl, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fail(fmt.Errorf("tunnel for port %d: %w", port, err))
		}
		go netns.ServeTunnel(tl, -1, port)
	}
	if cfg.DeadlineMs > 0 {
		time.AfterFunc(time.Until(time.UnixMilli(cfg.DeadlineMs)), func() {
			writeExitCode(dirFd, 124)
			os.Exit(124)
		})
	}
	fmt.Fprintln(ready, "ok")
	ready.Close()
	in.acceptLoop(ln)
	return 0
}

// containerInit is PID 1 of a sandbox inside the runtime's container: the exec server,
// the reaper of every process and the owner of the PTYs. Its descriptors are the
// runtime's 0, 1, 2, the control socket's listener and the ready pipe; it closes
// anything else before it serves. It returns only on a failed start.
func containerInit() int {
	ready := os.NewFile(initReadyFd, "ready")
	fail := func(err error) int {
		fmt.Fprintf(ready, "error: %v\n", err)
		fmt.Fprintf(os.Stderr, "sandbox init: %v\n", err)
		return 1
	}
	if err := closeFdsFrom(3, initReadyFd); err != nil {
		return fail(err)
	}
	unix.CloseOnExec(initReadyFd)
	_ = os.WriteFile("/proc/self/comm", []byte("sandbox-init"), 0) // what ps shows inside
	// Not dumpable: its /proc/1/fd and /proc/1/environ need CAP_SYS_PTRACE, which no
	// process inside has.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("prctl: %w", err))
	}
	cfg, ctlFd, err := readInitConfig(0)
	if err != nil {
		return fail(fmt.Errorf("read config: %w", err))
	}
	if devNull, err := os.Open("/dev/null"); err == nil {
		if err := unix.Dup3(int(devNull.Fd()), 0, 0); err != nil {
			return fail(fmt.Errorf("stdin: %w", err))
		}
		devNull.Close()
	}
	f := os.NewFile(uintptr(ctlFd), "control")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fail(fmt.Errorf("control socket: %w", err))
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	in := &initServer{cfg: cfg, waiters: map[int]chan syscall.WaitStatus{}, sp: newSpawnClient()}
	go in.reaper()
	if cfg.DeadlineMs > 0 {
		time.AfterFunc(time.Until(time.UnixMilli(cfg.DeadlineMs)), func() { os.Exit(124) })
	}
	fmt.Fprintln(ready, "ok")
	ready.Close()
	in.acceptLoop(ln)
	return 0
}

// readInitConfig reads init's configuration from the socket fd until its end, and the
// control socket's listener sent with it.
func readInitConfig(fd int) (initConfig, int, error) {
	var cfg initConfig
	var data []byte
	ctl := -1
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		n, oobn, _, _, err := unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return cfg, -1, err
		}
		if scms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
			for _, scm := range scms {
				if rights, err := unix.ParseUnixRights(&scm); err == nil {
					for _, r := range rights {
						if ctl < 0 {
							ctl = r
						} else {
							unix.Close(r)
						}
					}
				}
			}
		}
		if n == 0 {
			break
		}
		data = append(data, buf[:n]...)
		if len(data) > maxSpawnMsg {
			return cfg, -1, errors.New("configuration too large")
		}
	}
	if ctl < 0 {
		return cfg, -1, errors.New("no control socket came with the configuration")
	}
	return cfg, ctl, json.Unmarshal(data, &cfg)
}

// acceptLoop serves the control socket's connections from the engine.
func (in *initServer) acceptLoop(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !trustedPeer(c, in.cfg.Isolated) {
			c.Close()
			continue
		}
		go in.serve(c)
	}
}

func writeExitCode(dirFd, code int) {
	fd, err := unix.Openat(dirFd, state.ExitFile, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return
	}
	_, _ = unix.Write(fd, []byte(strconv.Itoa(code)))
	unix.Close(fd)
}
