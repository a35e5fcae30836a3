package local

// The shim: one host-side process per sandbox, this binary in its shim mode. The engine
// starts it in a mount namespace of its own (so the sandbox's root, binds and volumes
// are mounted there and nowhere on the host, and go with it), hands it its
// configuration over a pipe, and it:
//
//   - builds the sandbox's root file system (rootfs.Build);
//   - writes the OCI bundle (oci.WriteBundle) and runs the runtime's create and start, with
//     the control socket's listener and init's ready pipe as the only descriptors
//     passed in (--preserve-fds);
//   - serves the sandbox's tunnels (host listeners it holds) and its egress proxy (a
//     listener made inside the sandbox's network namespace, dialing from the host's
//     network with the host's resolver);
//   - is the subreaper of the container's init, and, when init ends, records its exit
//     code, deletes the container and exits.
//
// Nothing the shim holds is open in any sandbox process: it marks every descriptor it
// did not expect close-on-exec at start, and the runtime gets only what it needs.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/netns"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
)

// shimConfig is what the engine sends to the shim on fd 3.
type shimConfig struct {
	Init initConfig `json:"init"`
	// Runtime is the OCI runtime binary; RuntimeRoot its --root (under the data dir).
	Runtime     string `json:"runtime"`
	RuntimeRoot string `json:"runtimeRoot"`
	// InitBinary is the host path of the binary bound at oci.InitPath.
	InitBinary string        `json:"initBinary"`
	Limits     engine.Limits `json:"limits"`
	Cgroup     string        `json:"cgroup"`
	// Egress serves the egress proxy inside the sandbox's network namespace.
	Egress      bool     `json:"egress,omitempty"`
	EgressHosts []string `json:"egressHosts,omitempty"`
	// Secrets carry their values: this pipe is the only way they take.
	Secrets []shimSecret `json:"secrets,omitempty"`
	// TimeoutMs is Spec.Timeout: the sandbox's lifetime counts from when its init is
	// configured, not from the start of a create that a loaded machine makes slow.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// shimSecret is an engine.Secret with its value (which engine.Secret never marshals).
type shimSecret struct {
	Name  string   `json:"name"`
	Value string   `json:"value"`
	Hosts []string `json:"hosts"`
}

// Descriptors of the shim.
const (
	shimCfgFd    = 3
	shimReadyFd  = 4
	shimTunnelFd = 5 // and on, one per Spec.Ports entry
)

// initReadyFd is the container's init's ready pipe (after its 0, 1, 2): init writes
// "ok\n" there once it serves. Its stdin is a socket pair on which the shim sends its
// configuration and, with it, the control socket's listener, made inside the
// sandbox's network namespace once the runtime has created it.
const initReadyFd = 3

// shimMountBase is where, in its own mount namespace, the shim mounts a small tmpfs
// for the sandbox's root and init binary: the runtime reaches them from inside the
// sandbox's user namespace, where the data dir (0700, the host's root) cannot be
// traversed. The directory on the host stays empty.
const shimMountBase = "/run/sandbox-mcp-shim"

// Files of a sandbox directory the shim writes.
const (
	dirBundle = "bundle"
	filePid   = "bundle/pid"
)

// shimMain is the shim process.
func shimMain() int {
	ready := os.NewFile(shimReadyFd, "ready")
	fail := func(err error) int {
		fmt.Fprintf(ready, "error: %v\n", err)
		fmt.Fprintf(os.Stderr, "sandbox shim: %v\n", err)
		return 1
	}
	cfgFile := os.NewFile(shimCfgFd, "config")
	var cfg shimConfig
	err := json.NewDecoder(io.LimitReader(cfgFile, maxSpawnMsg)).Decode(&cfg)
	cfgFile.Close()
	if err != nil {
		return fail(fmt.Errorf("read config: %w", err))
	}
	keep := []int{shimReadyFd}
	for i := range cfg.Init.Tunnels {
		keep = append(keep, shimTunnelFd+i)
	}
	if err := closeFdsFrom(3, keep...); err != nil {
		return fail(err)
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGPIPE)
	// The container's init re-parents to the shim when the runtime's create exits.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("become a subreaper: %w", err))
	}
	s := &shim{cfg: cfg, dir: cfg.Init.Dir, id: cfg.Init.ID}
	pid, err := s.start()
	if err != nil {
		s.deleteContainer()
		return fail(err)
	}
	// The secrets' placeholders (never their values) go to the engine with the pid,
	// for every exec's environment.
	env, err := json.Marshal(s.secrets.Env())
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(ready, "ok %d %s\n", pid, env)
	ready.Close()
	code := s.wait(pid)
	s.deleteContainer()
	return code
}

type shim struct {
	cfg     shimConfig
	secrets *egress.Secrets
	dir, id string
	netns   int // the sandbox's network namespace, once created
	created bool
}

// runtimeCmd is a command of the OCI runtime on this sandbox's runtime root.
func (s *shim) runtimeCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(s.cfg.Runtime, append([]string{"--root", s.cfg.RuntimeRoot}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stderr = os.Stderr
	cmd.Stdout = os.Stderr
	return cmd
}

// start builds the root, creates and starts the container and returns its init's
// host pid once init serves. The shim logs where the time went (root, the runtime's
// create and start, init).
func (s *shim) start() (int, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return 0, fmt.Errorf("make / private: %w", err)
	}
	t0 := time.Now()
	if err := s.loadSecrets(); err != nil {
		return 0, err
	}
	bundle, err := s.writeBundle()
	if err != nil {
		return 0, err
	}
	tRoot := time.Since(t0)
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer readyR.Close()
	t1 := time.Now()
	pid, cfgW, err := s.create(bundle, readyW)
	if err != nil {
		return 0, err
	}
	tCreate := time.Since(t1)
	if err := s.configure(pid, cfgW); err != nil {
		return 0, err
	}
	if err := s.serveTunnels(); err != nil {
		return 0, err
	}
	if s.cfg.Egress && s.cfg.Init.NetNS {
		if err := s.serveEgress(); err != nil {
			return 0, fmt.Errorf("egress proxy: %w", err)
		}
	}
	t2 := time.Now()
	if err := s.runtimeCmd("start", s.id).Run(); err != nil {
		return 0, fmt.Errorf("%s start: %w", filepath.Base(s.cfg.Runtime), err)
	}
	tStart := time.Since(t2)
	t3 := time.Now()
	line, err := readLine(readyR, 30*time.Second)
	if err != nil {
		return 0, fmt.Errorf("sandbox init: %w: %s", err, logTail(filepath.Join(s.dir, fileInitLg)))
	}
	if line != "ok" {
		return 0, fmt.Errorf("sandbox init: %s", strings.TrimPrefix(line, "error: "))
	}
	fmt.Fprintf(os.Stderr, "sandbox shim: root %v, create %v, start %v, init %v\n", tRoot, tCreate, tStart, time.Since(t3))
	return pid, nil
}

// logTail is the last lines of a log, for an error message.
func logTail(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "no log"
	}
	b = []byte(strings.TrimSpace(string(b)))
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.ReplaceAll(string(b), "\n", "; ")
}

// readLine reads one line from f within timeout.
func readLine(f *os.File, timeout time.Duration) (string, error) {
	ch := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(f).ReadString('\n')
		if err != nil && line == "" {
			errc <- fmt.Errorf("it ended before it was ready: %w", err)
			return
		}
		ch <- strings.TrimSpace(line)
	}()
	select {
	case l := <-ch:
		return l, nil
	case err := <-errc:
		return "", err
	case <-time.After(timeout):
		return "", fmt.Errorf("not ready after %v", timeout)
	}
}

// controlListener makes the control socket in the sandbox's directory (reached
// through a directory descriptor: the data dir's path may be long).
func (s *shim) controlListener() (*os.File, error) {
	dirFd, err := unix.Open(s.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirFd)
	p := "/proc/self/fd/" + strconv.Itoa(dirFd) + "/" + fileCtl
	_ = os.Remove(p)
	var ln net.Listener
	listen := func() error {
		var err error
		ln, err = net.Listen("unix", p)
		return err
	}
	if s.netns > 0 {
		err = netns.Do(s.netns, listen)
	} else {
		err = listen()
	}
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ul := ln.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(p, 0o600); err != nil {
		ul.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	f, err := ul.File()
	ul.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return f, nil
}

// serveTunnels forwards every connection of each host listener to its port on the
// sandbox's loopback.
func (s *shim) serveTunnels() error {
	for i, port := range s.cfg.Init.Tunnels {
		f := os.NewFile(uintptr(shimTunnelFd+i), "tunnel")
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("tunnel for port %d: %w", port, err)
		}
		nsfd := -1
		if s.netns > 0 {
			nsfd = s.netns
		}
		go netns.ServeTunnel(ln, nsfd, port)
	}
	return nil
}

// serveEgress serves the egress proxy on 127.0.0.1:rules.PortEgressProxy inside the
// sandbox's network namespace: the listening socket is made there by a thread that
// entered it, and stays with the shim. Upstream connections and name lookups are the
// host's.
func (s *shim) serveEgress() error {
	hosts := s.cfg.EgressHosts
	if len(hosts) > 0 {
		// A secret's hosts are allowed too (an empty list already allows every
		// public host).
		hosts = append(append([]string(nil), hosts...), s.secrets.Hosts()...)
	}
	return netns.ServeEgress(s.netns, egress.Config{Hosts: hosts, Secrets: s.secrets})
}

// wait reaps the shim's children until the container's init (pid) ends, and returns
// its exit code; an exit by itself (a deadline) is recorded in the sandbox directory.
func (s *shim) wait(pid int) int {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 1 // no child left
		}
		if got != pid {
			continue
		}
		if ws.Exited() {
			if err := state.WriteExitCode(s.dir, ws.ExitStatus()); err != nil {
				fmt.Fprintf(os.Stderr, "sandbox shim: record the exit code: %v\n", err)
			}
			return ws.ExitStatus()
		}
		return 128 + int(ws.Signal())
	}
}

// deleteContainer removes the container from the runtime (its state, its cgroups).
func (s *shim) deleteContainer() {
	if !s.created {
		// A failed create can leave a half-made container behind.
		_ = s.runtimeCmd("delete", "--force", s.id).Run()
		return
	}
	if err := s.runtimeCmd("delete", "--force", s.id).Run(); err != nil {
		fmt.Fprintf(os.Stderr, "sandbox shim: delete the container: %v\n", err)
	}
}
