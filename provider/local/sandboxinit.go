package local

// The init of a sandbox: the engine re-executes its own binary with initEnv set, in
// new mount, pid, uts, ipc (and net) namespaces. This process is PID 1 of the sandbox:
// it builds the sandbox's root (the host's root read-only, the sandbox's own writable
// directories), pivots into it, and then serves the control socket (exec) and reaps
// every process of the sandbox. When it dies the kernel kills everything in its pid
// namespace and the mount namespace goes with the last process.

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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
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
	// Tunnels are the sandbox ports served by the host listeners on fds 5, 6, ….
	Tunnels []int `json:"tunnels,omitempty"`
	// HostNetFd, when not zero, is the host's network namespace: init serves the
	// egress proxy.
	HostNetFd int `json:"hostNetFd,omitempty"`
	// DeadlineMs ends the sandbox (exit 124) at this Unix time in ms; 0 means never.
	DeadlineMs int64 `json:"deadlineMs,omitempty"`
}

type bindMount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly,omitempty"`
}

// Names of a sandbox's directory entries on the host.
const (
	dirHome    = "home"
	dirTmp     = "tmp"
	dirVarTmp  = "vartmp"
	dirRun     = "run"
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
	if cfg.Isolated {
		// Not dumpable: its /proc/1/fd, /proc/1/root and /proc/1/environ need
		// CAP_SYS_PTRACE, which no process inside has (an open descriptor of init's
		// is a way back to the host).
		if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
			return fail(fmt.Errorf("prctl: %w", err))
		}
		if cfg.HostNetFd > 0 {
			unix.CloseOnExec(cfg.HostNetFd)
		}
		if err := setupRoot(cfg); err != nil {
			return fail(fmt.Errorf("set up the sandbox root: %w", err))
		}
		if err := unix.Sethostname([]byte(cfg.ID)); err != nil {
			return fail(fmt.Errorf("sethostname: %w", err))
		}
		if cfg.NetNS {
			if err := loopbackUp(); err != nil {
				return fail(fmt.Errorf("loopback: %w", err))
			}
			if cfg.HostNetFd > 0 {
				g, err := newEgress(cfg.HostNetFd)
				if err == nil {
					err = g.serve()
				}
				if err != nil {
					return fail(fmt.Errorf("egress proxy: %w", err))
				}
			}
		}
	}
	in := &initServer{cfg: cfg, waiters: map[int]chan syscall.WaitStatus{}, spawn: make(chan spawnReq)}
	go in.spawner(cfg.Isolated)
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

// setupRoot builds the sandbox's root under cfg.Dir/root and pivots into it.
func setupRoot(cfg initConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	r := filepath.Join(cfg.Dir, dirRoot)
	stage := filepath.Join(cfg.Dir, dirStage)
	for _, d := range []string{r, stage} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("tmpfs", r, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("root tmpfs: %w", err)
	}
	if err := unix.Mount("tmpfs", stage, "tmpfs", 0, "mode=0700"); err != nil {
		return fmt.Errorf("stage tmpfs: %w", err)
	}
	entries, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		src, dst := "/"+name, filepath.Join(r, name)
		switch name {
		case "proc", "sys", "dev", "home", "tmp", "run":
			continue
		}
		switch {
		case e.Type()&os.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
		case e.IsDir():
			if err := os.Mkdir(dst, 0o755); err != nil {
				return err
			}
			if err := bindReadOnly(src, dst, true); err != nil {
				return err
			}
		case e.Type().IsRegular():
			if err := os.WriteFile(dst, nil, 0o644); err != nil {
				return err
			}
			if err := bindReadOnly(src, dst, false); err != nil {
				return err
			}
		}
	}
	for _, d := range []string{"proc", "sys", "dev", "home", "tmp", "run"} {
		if err := os.Mkdir(filepath.Join(r, d), 0o755); err != nil {
			return err
		}
	}
	// The sandbox's writable directories.
	if err := unix.Mount("tmpfs", filepath.Join(r, "home"), "tmpfs", 0, "mode=0755"); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(r, "home/user"), 0o755); err != nil {
		return err
	}
	for _, b := range [][2]string{{dirHome, "home/user"}, {dirTmp, "tmp"}, {dirRun, "run"}, {dirVarTmp, "var/tmp"}} {
		dst := filepath.Join(r, b[1])
		if fi, err := os.Stat(dst); err != nil || !fi.IsDir() {
			if err := ensureMountpoint(r, stage, "/"+b[1], true); err != nil {
				return err
			}
		}
		if err := unix.Mount(filepath.Join(cfg.Dir, b[0]), dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", b[1], err)
		}
	}
	if err := setupDev(filepath.Join(r, "dev")); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	if err := setupProc(r); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	if err := unix.Mount("sysfs", filepath.Join(r, "sys"), "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		if err := bindReadOnly("/sys", filepath.Join(r, "sys"), true); err != nil {
			return fmt.Errorf("/sys: %w", err)
		}
	}
	for _, b := range cfg.Binds {
		fi, err := os.Stat(b.Source)
		if err != nil {
			return fmt.Errorf("mount %s: %w", b.Target, err)
		}
		if err := ensureMountpoint(r, stage, b.Target, fi.IsDir()); err != nil {
			return fmt.Errorf("mount %s: %w", b.Target, err)
		}
		dst := filepath.Join(r, b.Target)
		if err := unix.Mount(b.Source, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("mount %s: %w", b.Target, err)
		}
		if b.ReadOnly {
			if err := setReadOnly(dst, true); err != nil {
				return fmt.Errorf("mount %s read-only: %w", b.Target, err)
			}
		}
	}
	for _, h := range cfg.Hide {
		dst := filepath.Join(r, h)
		if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
			if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_RDONLY, "size=4k,mode=0755"); err != nil {
				return fmt.Errorf("hide %s: %w", h, err)
			}
		}
	}
	for _, d := range []string{r, filepath.Join(r, "home"), filepath.Join(r, "dev")} {
		if err := setReadOnly(d, false); err != nil {
			return fmt.Errorf("read-only %s: %w", d, err)
		}
	}
	if err := os.Chdir(r); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	return os.Chdir("/")
}

// bindReadOnly bind-mounts src on dst (recursively when rec) and makes it read-only.
func bindReadOnly(src, dst string, rec bool) error {
	flags := uintptr(unix.MS_BIND)
	if rec {
		flags |= unix.MS_REC
	}
	if err := unix.Mount(src, dst, "", flags, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return setReadOnly(dst, rec)
}

func setReadOnly(path string, rec bool) error {
	var flags uint
	if rec {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, path, flags, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY})
}

// ensureMountpoint creates target (a directory or an empty file) inside the root r.
// Where its parent is read-only host land, the nearest existing ancestor gets a
// tmpfs-backed overlay first, so nothing is ever created on the host.
func ensureMountpoint(r, stage, target string, dir bool) error {
	p := filepath.Join(r, target)
	if _, err := os.Lstat(p); err == nil {
		return nil
	}
	anc := filepath.Dir(p)
	for {
		if _, err := os.Stat(anc); err == nil {
			break
		}
		anc = filepath.Dir(anc)
	}
	create := func() error {
		if dir {
			return os.MkdirAll(p, 0o755)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		return os.WriteFile(p, nil, 0o644)
	}
	err := create()
	if err == nil || !errors.Is(err, syscall.EROFS) {
		return err
	}
	up, err := os.MkdirTemp(stage, "up-")
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp(stage, "work-")
	if err != nil {
		return err
	}
	opts := "lowerdir=" + anc + ",upperdir=" + up + ",workdir=" + work
	if err := unix.Mount("overlay", anc, "overlay", 0, opts); err != nil {
		return fmt.Errorf("overlay on %s: %w", strings.TrimPrefix(anc, r), err)
	}
	return create()
}

// setupDev makes a minimal /dev: the harmless character devices bound from the host,
// a private devpts and a /dev/shm.
func setupDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID, "mode=0755"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		dst := filepath.Join(dev, n)
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := unix.Mount("shm", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return err
	}
	for name, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return nil
}

// setupProc mounts the sandbox's own /proc with the kernel-wide knobs read-only and
// the kernel's memory and keys masked, as container runtimes do.
func setupProc(r string) error {
	proc := filepath.Join(r, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	for _, n := range []string{"sys", "sysrq-trigger", "irq", "bus", "fs"} {
		p := filepath.Join(proc, n)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := bindReadOnly(p, p, true); err != nil {
			return err
		}
	}
	for _, n := range []string{"kcore", "keys", "timer_list", "sched_debug", "kallsyms"} {
		p := filepath.Join(proc, n)
		if _, err := os.Stat(p); err != nil {
			continue
		}
		if err := unix.Mount(filepath.Join(r, "dev/null"), p, "", unix.MS_BIND, ""); err != nil {
			return err
		}
	}
	return nil
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// keptCaps are the capabilities processes of an isolated sandbox keep (those a
// container runtime grants by default); every other one leaves the bounding set, so
// root inside cannot remount the host's read-only root, load modules or open files by
// handle.
var keptCaps = map[int]bool{
	unix.CAP_CHOWN: true, unix.CAP_DAC_OVERRIDE: true, unix.CAP_FSETID: true, unix.CAP_FOWNER: true,
	unix.CAP_MKNOD: true, unix.CAP_NET_RAW: true, unix.CAP_SETGID: true, unix.CAP_SETUID: true,
	unix.CAP_SETFCAP: true, unix.CAP_SETPCAP: true, unix.CAP_NET_BIND_SERVICE: true,
	unix.CAP_SYS_CHROOT: true, unix.CAP_KILL: true, unix.CAP_AUDIT_WRITE: true,
}

type spawnReq struct {
	argv0 string
	argv  []string
	attr  *syscall.ProcAttr
	reply chan spawnRes
}

type spawnRes struct {
	pid  int
	wait chan syscall.WaitStatus
	err  error
}

type initServer struct {
	cfg     initConfig
	mu      sync.Mutex // held while forking and while reaping
	waiters map[int]chan syscall.WaitStatus
	spawn   chan spawnReq
}

// spawner forks every command from one locked OS thread whose bounding set lacks the
// dropped capabilities (the bounding set is per thread, and a child inherits its
// forking thread's).
func (in *initServer) spawner(isolated bool) {
	runtime.LockOSThread()
	if isolated {
		last := 40
		if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
			if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				last = n
			}
		}
		for c := 0; c <= last; c++ {
			if !keptCaps[c] {
				_ = unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
			}
		}
	}
	for r := range in.spawn {
		in.mu.Lock()
		pid, err := syscall.ForkExec(r.argv0, r.argv, r.attr)
		var w chan syscall.WaitStatus
		if err == nil {
			w = make(chan syscall.WaitStatus, 1)
			in.waiters[pid] = w
		}
		in.mu.Unlock()
		r.reply <- spawnRes{pid: pid, wait: w, err: err}
	}
}

// reaper reaps every child and orphan of the sandbox, handing the statuses of the
// commands it started to their waiters.
func (in *initServer) reaper() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	for range ch {
		in.mu.Lock()
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
			if w, ok := in.waiters[pid]; ok {
				w <- ws
				delete(in.waiters, pid)
			}
		}
		in.mu.Unlock()
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
	devNull, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		sendExit(exitFrame{Code: -1, Error: err.Error()})
		return
	}
	defer devNull.Close()
	files := []uintptr{devNull.Fd(), devNull.Fd(), devNull.Fd()}
	var stdinW, stdoutR, stderrR *os.File
	var closeAfterStart []*os.File
	var ptmx *os.File
	switch {
	case req.Detach:
	case req.TTY:
		m, tty, err := pty.Open()
		if err != nil {
			sendExit(exitFrame{Code: -1, Error: "open a pty: " + err.Error()})
			return
		}
		cols, rows := req.Cols, req.Rows
		if cols == 0 || rows == 0 {
			cols, rows = 80, 24
		}
		_ = pty.Setsize(m, &pty.Winsize{Cols: cols, Rows: rows})
		ptmx = m
		files = []uintptr{tty.Fd(), tty.Fd(), tty.Fd()}
		closeAfterStart = append(closeAfterStart, tty)
		stdinW, stdoutR = m, m
	default:
		if req.Stdin {
			r, w, err := os.Pipe()
			if err != nil {
				sendExit(exitFrame{Code: -1, Error: err.Error()})
				return
			}
			files[0], stdinW = r.Fd(), w
			closeAfterStart = append(closeAfterStart, r)
		}
		or, ow, err := os.Pipe()
		if err != nil {
			sendExit(exitFrame{Code: -1, Error: err.Error()})
			return
		}
		er, ew, err := os.Pipe()
		if err != nil {
			sendExit(exitFrame{Code: -1, Error: err.Error()})
			return
		}
		files[1], files[2], stdoutR, stderrR = ow.Fd(), ew.Fd(), or, er
		closeAfterStart = append(closeAfterStart, ow, ew)
	}
	sys := &syscall.SysProcAttr{Setpgid: !req.Detach, Setsid: req.Detach}
	if ptmx != nil {
		// Its own session with the pty as controlling terminal (fd 0).
		sys = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	}
	attr := &syscall.ProcAttr{Dir: req.Cwd, Env: req.Env, Files: files, Sys: sys}
	reply := make(chan spawnRes, 1)
	in.spawn <- spawnReq{argv0: argv0, argv: req.Argv, attr: attr, reply: reply}
	res := <-reply
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
	pid := res.pid
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
	case ws = <-res.wait:
	case <-timeout:
		timedOut = true
		kill()
		ws = <-res.wait
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
	sendExit(e)
}
