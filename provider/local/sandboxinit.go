package local

// The init of a sandbox: the engine re-executes its own binary with initEnv set, in
// new mount, pid, uts, ipc (and net) namespaces. This process is PID 1 of the sandbox:
// it builds the sandbox's root (the host's root read-only, the sandbox's own writable
// directories), pivots into it, and then serves the control socket (exec) and reaps
// every process of the sandbox. When it dies the kernel kills everything in its pid
// namespace and the mount namespace goes with the last process.

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// initEnv marks the hidden init mode of any binary that links this package.
const initEnv = "_SANDBOX_MCP_ENGINE_INIT"

// initConfig is what the engine sends to init on fd 3.
type initConfig struct {
	ID       string `json:"id"`
	Dir      string `json:"dir"` // the sandbox's directory on the host
	Isolated bool   `json:"isolated"`
	NetNS    bool   `json:"netns"`
	// Hide are host directories covered with an empty tmpfs inside (the data dir).
	Hide  []string    `json:"hide,omitempty"`
	Binds []bindMount `json:"binds,omitempty"`
	// Layers are the image's layer directories on the host, lowest first; empty
	// means the host's system directories.
	Layers []string `json:"layers,omitempty"`
	// Tunnels are the sandbox ports served by the host listeners on fds 5, 6, ….
	Tunnels []int `json:"tunnels,omitempty"`
	// HostNetFd, when not zero, is the host's network namespace: init serves the
	// egress proxy.
	HostNetFd int `json:"hostNetFd,omitempty"`
	// EgressHosts is the sandbox's Spec.EgressHosts, for the egress proxy.
	EgressHosts []string `json:"egressHosts,omitempty"`
	// DeadlineMs ends the sandbox (exit 124) at this Unix time in ms; 0 means never.
	DeadlineMs int64 `json:"deadlineMs,omitempty"`
}

type bindMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
	// Host marks a host directory of Spec.Mounts: read-write, it is bound as it is,
	// never id-mapped (see setupRoot).
	Host bool `json:"host,omitempty"`
}

// Names of a sandbox's directory entries on the host.
const (
	dirHome    = "disk/home" // the writable directories are on the sandbox's disk (disk.go)
	dirTmp     = "disk/tmp"
	dirVarTmp  = "disk/vartmp"
	dirRun     = "disk/run"
	dirRoot    = "root"  // the mount point of the sandbox's root, only used inside
	dirStage   = "stage" // overlay upper dirs, only used inside
	fileCtl    = "control.sock"
	fileExit   = "exit"
	fileState  = "state.json"
	fileInitLg = "init.log"
)

func init() {
	switch os.Getenv(initEnv) {
	case "":
		return
	case "probe":
		os.Exit(0)
	case "spawner":
		os.Unsetenv(initEnv)
		unix.CloseOnExec(3)
		os.Exit(spawnerMain())
	default:
		os.Exit(sandboxInit())
	}
}

// sandboxInit runs init; it returns only on a failed start.
func sandboxInit() int {
	os.Unsetenv(initEnv)
	_ = os.WriteFile("/proc/self/comm", []byte("sandbox-init"), 0) // what ps shows inside
	cfgFile, ready := os.NewFile(3, "config"), os.NewFile(4, "ready")
	var cfg initConfig
	err := json.NewDecoder(cfgFile).Decode(&cfg)
	cfgFile.Close()
	fail := func(err error) int {
		fmt.Fprintf(ready, "error: %v\n", err)
		fmt.Fprintf(os.Stderr, "sandbox init: %v\n", err)
		return 1
	}
	if err != nil {
		return fail(fmt.Errorf("read config: %w", err))
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
	var sp *spawnClient
	if cfg.Isolated {
		if sp, err = isolate(cfg); err != nil {
			return fail(err)
		}
	}
	in := &initServer{cfg: cfg, waiters: map[int]chan syscall.WaitStatus{}, sp: sp}
	go in.reaper()
	for i, port := range cfg.Tunnels {
		f := os.NewFile(uintptr(5+i), "tunnel")
		tl, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fail(fmt.Errorf("tunnel for port %d: %w", port, err))
		}
		go serveTunnel(tl, port)
	}
	if cfg.DeadlineMs > 0 {
		time.AfterFunc(time.Until(time.UnixMilli(cfg.DeadlineMs)), func() {
			writeExitCode(dirFd, 124)
			os.Exit(124)
		})
	}
	fmt.Fprintln(ready, "ok")
	ready.Close()
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !trustedPeer(c, cfg.Isolated) {
			c.Close()
			continue
		}
		go in.serve(c)
	}
}

func writeExitCode(dirFd, code int) {
	fd, err := unix.Openat(dirFd, fileExit, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return
	}
	_, _ = unix.Write(fd, []byte(strconv.Itoa(code)))
	unix.Close(fd)
}

// isolate makes init non-dumpable, starts the spawner, builds the sandbox's root and
// pivots into it, sets the host name and brings up the loopback and the egress proxy.
func isolate(cfg initConfig) (*spawnClient, error) {
	// Not dumpable: its /proc/1/fd, /proc/1/root and /proc/1/environ need
	// CAP_SYS_PTRACE, which no process inside has (an open descriptor of init's
	// is a way back to the host).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("prctl: %w", err)
	}
	if cfg.HostNetFd > 0 {
		unix.CloseOnExec(cfg.HostNetFd)
	}
	if err := privateProc(); err != nil {
		return nil, err
	}
	sp := newSpawnClient()
	spPid, err := sp.start()
	if err != nil {
		return nil, err
	}
	userns, err := unix.Open("/proc/"+strconv.Itoa(spPid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("the spawner's user namespace: %w", err)
	}
	err = setupRoot(cfg, userns)
	unix.Close(userns)
	if err != nil {
		return nil, fmt.Errorf("set up the sandbox root: %w", err)
	}
	if err := unix.Sethostname([]byte(cfg.ID)); err != nil {
		return nil, fmt.Errorf("sethostname: %w", err)
	}
	if cfg.NetNS {
		if err := loopbackUp(); err != nil {
			return nil, fmt.Errorf("loopback: %w", err)
		}
		if cfg.HostNetFd > 0 {
			g, _, err := newEgressProxy(cfg.HostNetFd, cfg.EgressHosts, nil)
			if err == nil {
				err = serveEgress(g)
			}
			if err != nil {
				return nil, fmt.Errorf("egress proxy: %w", err)
			}
		}
	}
	return sp, nil
}
