package local

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Root inside cannot make or open block devices, reach the kernel's keyrings, make
// namespaces (no nested user namespace, so no mounts either) or mount, on every root
// kind: the image's own programs are refused as the host's are.
func TestSandboxHardening(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testHardening(t, k) })
	}
}

func testHardening(t *testing.T, k rootKind) {
	e, base := k.engine(t)
	info := k.create(t, e, base, engine.Spec{})
	// Each check below must fail for the right reason, not for a missing program.
	if out, code := sh(t, e, info.ID, "bash", "-c", "for p in mknod perl unshare mount hostname df; do command -v $p >/dev/null || echo missing $p; done"); code != 0 || out != "" {
		t.Fatalf("programs of the checks inside: %q (exit %d)", out, code)
	}
	for _, tc := range []struct{ name, script string }{
		{"mknod a block device", "mknod /tmp/sda b 8 0"},
		{"mknod on /dev/shm", "mknod /dev/shm/sda b 8 0"},
		// keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0)
		{"keyctl", fmt.Sprintf(`perl -e 'exit(syscall(%d, 0, -4, 0) == -1 ? 1 : 0)'`, unix.SYS_KEYCTL)},
		{"add_key", fmt.Sprintf(`perl -e 'exit(syscall(%d, "user", "k", "v", 1, -4) == -1 ? 1 : 0)'`, unix.SYS_ADD_KEY)},
		{"unshare -Urm", "unshare -Urm true"},
		{"unshare -m", "unshare -m true"},
		{"unshare -n", "unshare -n true"},
		{"mount a tmpfs", "mount -t tmpfs x /tmp"},
		{"remount / read-write", "mount -o remount,rw /"},
		{"sethostname", "hostname evil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if out, code := sh(t, e, info.ID, "bash", "-c", tc.script+" 2>&1"); code == 0 {
				t.Errorf("%s succeeded inside: %q", tc.script, out)
			}
		})
	}
	if out, _ := sh(t, e, info.ID, "grep", "-E", "^(Seccomp|NoNewPrivs):", "/proc/self/status"); strings.Join(strings.Fields(out), " ") != "NoNewPrivs: 0 Seccomp: 2" {
		t.Errorf("filter state inside = %q, want a filter (2) without no_new_privs", out)
	}
	// What the filter lets through still works: threads, fork, exec, a pty.
	if out, code := sh(t, e, info.ID, "bash", "-c", "(sleep 0.01 &) ; wait; echo ok | cat; df /dev/shm | tail -1 | awk '{print $2}'"); code != 0 || !strings.HasPrefix(out, "ok\n65536") {
		t.Errorf("ordinary work inside = %q (exit %d), want ok and a 64 MiB /dev/shm", out, code)
	}
}
