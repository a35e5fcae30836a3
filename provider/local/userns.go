package local

// Ids of an isolated sandbox: its commands run in a user namespace (see spawner.go)
// that maps ids 0…rules.IDCount-1 inside to rules.HostIDBase… on the host. What the
// engine creates for a sandbox is owned by those host ids, so root and the user
// inside own their files, and no file of the host is theirs.

import (
	"os"
	"path/filepath"
	"syscall"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// idMap is the sandbox's id mapping as the kernel's uid_map lines take it.
var idMap = []syscall.SysProcIDMap{{ContainerID: 0, HostID: rules.HostIDBase, Size: rules.IDCount}}

// hostID is the host id of id inside the sandbox.
func hostID(id int) int { return rules.HostIDBase + id }

func inSandboxRange(id uint32) bool {
	return id >= rules.HostIDBase && id < rules.HostIDBase+rules.IDCount
}

// mkdirOwned creates p and its missing parents below base, each owned by the owner of
// its parent.
func mkdirOwned(base, p string) error {
	if p == base || len(p) <= len(base) {
		return nil
	}
	if _, err := os.Lstat(p); err == nil {
		return nil
	}
	parent := filepath.Dir(p)
	if err := mkdirOwned(base, parent); err != nil {
		return err
	}
	if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(parent, &st); err != nil {
		return err
	}
	if inSandboxRange(st.Uid) {
		return os.Lchown(p, int(st.Uid), int(st.Gid))
	}
	return nil
}
