package rootfs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// inNamespaceEnv carries the sandbox directory to the test binary re-run in a mount
// namespace of its own, where Build's mounts go away with it.
const inNamespaceEnv = "ROOTFS_TEST_SANDBOX_DIR"

// TestBuildSystemRoot builds a default root (the host's system directories) with a
// read-only bind, a hidden directory and a trusted certificate, in a private mount
// namespace, and checks what the sandbox would see.
func TestBuildSystemRoot(t *testing.T) {
	if sd := os.Getenv(inNamespaceEnv); sd != "" {
		checkSystemRoot(t, sd)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("building a root needs root")
	}
	sd := t.TempDir()
	for _, d := range []string{DirHome, DirTmp, DirVarTmp, DirRun, "bound", "hidden"} {
		if err := os.MkdirAll(filepath.Join(sd, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sd, "bound", "f"), []byte("host file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBuildSystemRoot$", "-test.v")
	cmd.Env = append(os.Environ(), inNamespaceEnv+"="+sd)
	// Go makes the new namespace's mounts private before it runs the child.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestBuildSystemRoot")) {
		t.Fatalf("the build in a mount namespace failed (%v):\n%s", err, out)
	}
}

// checkSystemRoot runs in the private mount namespace.
func checkSystemRoot(t *testing.T, sd string) {
	userns := sandboxUserns(t)
	pem := []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n")
	cfg := Config{ID: "sb-test", Dir: sd, TrustPEM: pem,
		Binds: []Bind{{Source: filepath.Join(sd, "bound"), Target: "/srv/bound", ReadOnly: true}},
		Hide:  []string{filepath.Join(sd, "hidden")}}
	// The hidden directory is in the root only if something puts it there: a bind.
	cfg.Binds = append(cfg.Binds, Bind{Source: filepath.Join(sd, "hidden"), Target: filepath.Join(sd, "hidden"), ReadOnly: true})
	if err := os.WriteFile(filepath.Join(sd, "hidden", "secret"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := filepath.Join(sd, "root")
	ro, err := Build(cfg, r, userns)
	if err != nil {
		t.Fatal(err)
	}
	if !ro {
		t.Error("Build of a default root = writable, want read-only")
	}
	if b, err := os.ReadFile(filepath.Join(r, "etc/passwd")); err != nil || !strings.Contains(string(b), rules.UserName+":x:"+strconv.Itoa(rules.UserID)) {
		t.Errorf("/etc/passwd = %q (%v), want the sandbox's user", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(r, "etc/hostname")); err != nil || string(b) != "sb-test\n" {
		t.Errorf("/etc/hostname = %q (%v), want the sandbox's id", b, err)
	}
	if _, err := os.Stat(filepath.Join(r, "usr/bin/env")); err != nil {
		t.Errorf("/usr of the host is not there: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(r, "root"), &st); err != nil || st.Uid != hostRoot || st.Mode&0o777 != 0o700 {
		t.Errorf("/root: uid %d mode %o (%v), want %d and 0700", st.Uid, st.Mode&0o777, err, hostRoot)
	}
	if b, err := os.ReadFile(filepath.Join(r, "srv/bound/f")); err != nil || string(b) != "host file\n" {
		t.Errorf("bound file = %q (%v), want the host's", b, err)
	}
	if err := os.WriteFile(filepath.Join(r, "srv/bound/g"), nil, 0o644); err == nil {
		t.Error("a read-only bind took a write")
	}
	if _, err := os.Stat(filepath.Join(r, sd, "hidden", "secret")); err == nil {
		t.Error("a hidden directory's file is visible")
	}
	if b, err := os.ReadFile(filepath.Join(r, rules.TrustBundleFile)); err != nil || !bytes.HasSuffix(b, pem) {
		t.Errorf("the CA bundle does not end with the trusted certificate (%v)", err)
	}
	for _, p := range []string{"home/user", "tmp", "var/tmp", "run"} {
		if err := os.WriteFile(filepath.Join(r, p, "w"), nil, 0o644); err != nil {
			t.Errorf("/%s is not writable: %v", p, err)
		}
	}
	// The root itself is made read-only by the runtime (ro), /home here.
	if err := os.WriteFile(filepath.Join(r, "home/x"), nil, 0o644); err == nil {
		t.Error("/home of a default root took a write")
	}
}

// sandboxUserns is a user namespace with the sandbox's id mapping, held by a child
// process until the test ends.
func sandboxUserns(t *testing.T) int {
	t.Helper()
	idMap := []syscall.SysProcIDMap{{ContainerID: 0, HostID: rules.HostIDBase, Size: rules.IDCount}}
	hold := exec.Command("sleep", "600")
	hold.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: idMap, GidMappings: idMap,
		GidMappingsEnableSetgroups: true}
	if err := hold.Start(); err != nil {
		t.Fatalf("make the sandbox's user namespace: %v", err)
	}
	t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
	fd, err := unix.Open("/proc/"+strconv.Itoa(hold.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
