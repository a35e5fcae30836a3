package local

// Ids of an isolated sandbox: its commands run in a user namespace (see spawner.go)
// that maps ids 0…rules.IDCount-1 inside to rules.HostIDBase… on the host. What the
// engine creates for a sandbox is owned by those host ids, so root and the user
// inside own their files, and no file of the host is theirs.

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// idMap is the sandbox's id mapping as the kernel's uid_map lines take it.
var idMap = []syscall.SysProcIDMap{{ContainerID: 0, HostID: rules.HostIDBase, Size: rules.IDCount}}

// hostID is the host id of id inside the sandbox.
func hostID(id int) int { return rules.HostIDBase + id }

func inSandboxRange(id uint32) bool {
	return id >= rules.HostIDBase && id < rules.HostIDBase+rules.IDCount
}

// sandboxUserns returns a user namespace with the sandbox's id mapping (for
// id-mapped mounts), held by a child of this process until closed.
func sandboxUserns() (int, func(), error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, nil, err
	}
	defer r.Close()
	attr := &syscall.ProcAttr{
		Env:   []string{initEnv + "=" + modeHold},
		Files: []uintptr{r.Fd()},
		Sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: idMap, GidMappings: idMap,
			GidMappingsEnableSetgroups: true},
	}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"sandbox-userns"}, attr)
	if err != nil {
		w.Close()
		return -1, nil, fmt.Errorf("make the sandbox's user namespace: %w", err)
	}
	end := func() {
		w.Close()
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		end()
		return -1, nil, fmt.Errorf("the sandbox's user namespace: %w", err)
	}
	return fd, func() { unix.Close(fd); end() }, nil
}
