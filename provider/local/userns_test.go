package local

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// hostStatus returns the Uid and Gid lines of a host process's status.
func hostStatus(t *testing.T, pid int) (string, string) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var uid, gid string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			uid = strings.Join(strings.Fields(v), " ")
		}
		if v, ok := strings.CutPrefix(l, "Gid:"); ok {
			gid = strings.Join(strings.Fields(v), " ")
		}
	}
	return uid, gid
}

// Root inside is a non-zero uid on the host; the user inside is too, and both own
// their files, on every root kind.
func TestUserNamespace(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testUserNamespace(t, k) })
	}
}

func testUserNamespace(t *testing.T, k rootKind) {
	e, base := k.engine(t)
	info := k.create(t, e, base, engine.Spec{})
	bx, _ := e.lookup(info.ID)
	root := strconv.Itoa(rules.HostIDBase)
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"root", []string{"sleep", "1000"}, root},
		{"user", []string{"setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "sleep", "1001"}, strconv.Itoa(rules.HostIDBase + rules.UserID)},
	} {
		if _, err := e.StartDetached(t.Context(), info.ID, engine.ExecRequest{Argv: tc.argv}); err != nil {
			t.Fatal(err)
		}
		found := false
		for range 200 {
			for _, pid := range sandboxPIDs(bx.st) {
				cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
				if !strings.HasPrefix(string(cmd), "sleep\x00"+tc.argv[len(tc.argv)-1]) {
					continue
				}
				found = true
				uid, gid := hostStatus(t, pid)
				if want := strings.Repeat(tc.want+" ", 4)[:4*len(tc.want)+3]; uid != want || gid != want {
					t.Errorf("%s's process on the host: Uid %q Gid %q, want %s", tc.name, uid, gid, want)
				}
			}
			if found {
				break
			}
		}
		if !found {
			t.Errorf("%s's sleep not found on the host", tc.name)
		}
	}
	// Every process but init runs with a sandbox id on the host.
	for _, pid := range sandboxPIDs(bx.st) {
		if pid == bx.st.Pid {
			continue
		}
		if uid, _ := hostStatus(t, pid); strings.HasPrefix(uid, "0 ") {
			t.Errorf("process %d runs as the host's root: %s", pid, uid)
		}
	}
	out, code := sh(t, e, info.ID, "bash", "-c", `set -e
		id -u; touch /home/user/r /tmp/r; stat -c '%u:%g' /home/user /home/user/r /tmp/r
		setpriv --reuid=1000 --regid=1000 --clear-groups bash -c 'touch /home/user/u /tmp/u && stat -c %u:%g /home/user/u /tmp/u'
		hostname x 2>/dev/null && echo set the hostname || true`)
	if want := "0\n1000:1000\n0:0\n0:0\n1000:1000\n1000:1000\n"; code != 0 || out != want {
		t.Errorf("ids inside = %q (exit %d), want %q", out, code, want)
	}
	// What the engine writes belongs to the owner of its directory.
	if err := e.WriteFile(t.Context(), info.ID, "/home/user/d/f", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _ := sh(t, e, info.ID, "setpriv", "--reuid=1000", "--regid=1000", "--clear-groups", "stat", "-c", "%u:%g", "/home/user/d", "/home/user/d/f"); out != "1000:1000\n1000:1000\n" {
		t.Errorf("owners of engine-written files = %q, want the user's", out)
	}
}

// A host directory mounted read-write is not id-mapped: what root inside writes there
// belongs to the sandbox's ids on the host, never to the host's root (a setuid file of
// the host's root would be a way up for any host user).
func TestReadWriteHostMountKeepsSandboxIDs(t *testing.T) {
	e := newTestEngine(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	info := createBox(t, e, engine.Spec{Mounts: []engine.Mount{{Source: dir, Target: "/h"}}})
	sh(t, e, info.ID, "bash", "-c", "cp /bin/true /h/x && chmod 4755 /h/x")
	var st syscall.Stat_t
	if err := syscall.Stat(dir+"/x", &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != rules.HostIDBase {
		t.Errorf("a file root inside wrote to a host mount is uid %d on the host, want %d", st.Uid, rules.HostIDBase)
	}
}
