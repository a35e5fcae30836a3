package local

// Who may use a sandbox's control socket: only a process outside every sandbox. The
// socket is in the sandbox's directory of the data dir (0700), mounted in no sandbox;
// init reads the peer's credentials (SO_PEERCRED, taken by the kernel at connect): a
// process of this sandbox is visible in its pid namespace, which the engine never is
// (its pid reads 0). Unisolated
// sandboxes run as the engine's user on the host, so an engine refuses to run them
// beside isolated ones (the data dir's mode file), and the data dir is 0700.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// trustedPeer reports whether the connection comes from the engine's user outside the
// sandbox.
func trustedPeer(c net.Conn, isolated bool) bool {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return false
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil || err != nil {
		return false
	}
	if isolated {
		// Init is in the sandbox's user namespace, where the engine (the host's root)
		// has no id and reads as the overflow id; it is outside the sandbox's pid
		// namespace. A process of another sandbox has a mapped id (its root is 0
		// here), and its nobody, which reads as the overflow id too, may not open the
		// socket (0600, the host's root's).
		return cred.Pid == 0 && cred.Uid == overflowUID()
	}
	return cred.Uid == uint32(os.Geteuid())
}

// overflowUID is the id an unmapped uid reads as in a user namespace.
func overflowUID() uint32 {
	b, err := os.ReadFile("/proc/sys/kernel/overflowuid")
	if err != nil {
		return 65534
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 65534
	}
	return uint32(n)
}

// fileMode is the data dir's record of the kind of sandboxes it holds.
const fileMode = "mode"

// privateDataDir makes dir private to the engine's user.
func privateDataDir(dir string) error { return os.Chmod(dir, 0o700) }

// claimKind records in the data dir the kind of sandboxes it holds, at the first
// create; a create of the other kind is refused. Reading (List, Get, Terminate) is
// open to both.
func (e *Engine) claimKind() error {
	mode := "isolated"
	if e.o.Unisolated {
		mode = "unisolated"
	}
	p := filepath.Join(e.dir, fileMode)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return atomicfile.WriteFile(p, []byte(mode+"\n"), 0o600)
	}
	if err != nil {
		return err
	}
	if have := strings.TrimSpace(string(b)); have != mode {
		return fmt.Errorf("data dir %s holds %s sandboxes: no %s one beside them (their processes could reach the others' control sockets): %w",
			e.dir, have, mode, engine.ErrUnsupported)
	}
	return nil
}
