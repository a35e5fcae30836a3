package local

// The hidden modes of a binary that runs the local engine: the sandbox's init (PID 1
// inside the container, or a host process for an unisolated sandbox), its spawner, and
// the host-side shim. The engine re-executes its own binary with initEnv naming the
// mode; each main opts in by calling MaybeRunInit first, as runc's binary does with
// its init. No library init() takes the process over.

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// initEnv names the hidden mode of a binary that links this package.
const initEnv = "_SANDBOX_MCP_ENGINE_INIT"

// Modes (values of initEnv).
const (
	modeHostInit  = "1"         // the init of an unisolated sandbox, a host process
	modeContainer = "container" // the init of a sandbox, PID 1 inside the runtime's container
	modeSpawner   = "spawner"   // the process inside that forks the commands
	modeShim      = "shim"      // the host-side shim of a sandbox
	modeHold      = "hold"      // a process that holds a user namespace until its stdin ends
)

// MaybeRunInit runs the hidden mode this process was started in, if any, and exits;
// otherwise it returns at once. Every main that uses the local engine (and every
// TestMain of a test binary that does) calls it before anything else.
func MaybeRunInit() {
	mode := os.Getenv(initEnv)
	if mode == "" {
		return
	}
	os.Unsetenv(initEnv)
	switch mode {
	case modeSpawner:
		unix.CloseOnExec(3)
		os.Exit(spawnerMain())
	case modeContainer:
		os.Exit(containerInit())
	case modeShim:
		os.Exit(shimMain())
	case modeHold:
		b := make([]byte, 1)
		_, _ = os.Stdin.Read(b)
		os.Exit(0)
	default:
		os.Exit(sandboxInit())
	}
}

// closeFdsFrom closes every descriptor of this process from min on, but those in
// keep: a caller's descriptor (a shell's, a CI runner's, an open directory) never
// reaches a sandbox. The Go runtime's own (its poller, anonymous inodes) are left open
// and marked close-on-exec, as everything else this package opens already is.
func closeFdsFrom(min int, keep ...int) error {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	var fds []int
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(dir, buf)
		if err != nil {
			unix.Close(dir)
			return fmt.Errorf("list descriptors: %w", err)
		}
		if n <= 0 {
			break
		}
		_, _, names := unix.ParseDirent(buf[:n], -1, nil)
		for _, name := range names {
			if fd, err := strconv.Atoi(name); err == nil && fd >= min && fd != dir && !slices.Contains(keep, fd) {
				fds = append(fds, fd)
			}
		}
	}
	unix.Close(dir)
	for _, fd := range fds {
		target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err != nil {
			continue // closed meanwhile
		}
		if strings.HasPrefix(target, "anon_inode:") {
			unix.CloseOnExec(fd)
			continue
		}
		if err := unix.Close(fd); err != nil && err != unix.EBADF {
			return fmt.Errorf("close descriptor %d: %w", fd, err)
		}
	}
	return nil
}
