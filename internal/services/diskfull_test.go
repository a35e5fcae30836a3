package services

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// inPrivateTmpfs runs the calling test again in a child process with its own
// mount namespace (so the tmpfs is seen by it and its monitors only) and
// returns false; in that child it mounts a tmpfs of size bytes and returns
// true with its path. It skips where mounting is not permitted.
func inPrivateTmpfs(t *testing.T, size string) (string, bool) {
	t.Helper()
	const env = "SERVICES_TEST_TMPFS"
	if os.Getenv(env) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), env+"=1")
		// A new mount namespace; Go makes / private in it, so nothing leaks out.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		switch {
		case err != nil && strings.Contains(err.Error(), "operation not permitted"):
			t.Skipf("no mount namespace here: %v", err)
		case strings.Contains(string(out), "--- SKIP"):
			t.Skipf("child skipped:\n%s", out)
		case err != nil:
			t.Fatalf("%s in a private mount namespace: %v\n%s", t.Name(), err, out)
		}
		t.Logf("child:\n%s", out)
		return "", false
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir, true
}

// fill writes a file in dir until the file system is full and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 16<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill: %v", err)
			}
			break
		}
	}
	// Smaller writes until not even a byte fits.
	for _, err := f.Write(buf[:1]); err == nil; _, err = f.Write(buf[:1]) {
	}
	return p
}

// TestDiskFull (issue 12.6): with the state dir's disk full, a stop stops
// the service and says so, the list follows what happened, an expose takes
// effect, a start fails naming the cause without leaving any process, and
// everything is written once space comes back.
func TestDiskFull(t *testing.T) {
	mnt, child := inPrivateTmpfs(t, "1m")
	if !child {
		return
	}
	stateDir := filepath.Join(mnt, "state")
	m := newTestManager(t, Config{StateDir: stateDir, PollInterval: 20 * time.Millisecond, StopTimeout: time.Second})
	a := start(t, m, apitype.StartServiceRequest{Name: "a", Command: "sleep 300"})
	start(t, m, apitype.StartServiceRequest{Name: "b", Command: "sleep 300"})
	filler := fill(t, mnt)

	if err := m.Stop(t.Context(), "a"); err != nil {
		t.Errorf("Stop with the disk full: %v, want success (the service is stopped)", err)
	}
	if processExists(a.PID) {
		t.Error("service alive after Stop")
	}
	if s := get(t, m, "a"); s.Status != apitype.StatusStopped {
		t.Errorf("a after Stop with the disk full = %s, want stopped", s.Status)
	}
	name := uniqueName("full")
	_, err := m.Start(t.Context(), apitype.StartServiceRequest{Name: name, Command: "setsid sleep 300 & sleep 300"})
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("Start with the disk full = %v, want an error naming the cause", err)
	}
	waitFor(t, "nothing of the failed start", 5*time.Second, func() bool { return len(markedWith(ServiceEnv, name)) == 0 })
	if _, err := m.Get(name); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(%s) after a failed start = %v, want not found", name, err)
	}
	onDisk, _, err := readState(filepath.Join(stateDir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if r := onDisk.Services["a"]; r == nil || r.Status != apitype.StatusRunning {
		t.Fatalf("a on disk while full = %+v; the test expects the write to have failed", r)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the state kept in memory to be written", 10*time.Second, func() bool {
		st, _, err := readState(filepath.Join(stateDir, "state.json"))
		return err == nil && st.Services["a"] != nil && st.Services["a"].Status == apitype.StatusStopped
	})
	start(t, m, apitype.StartServiceRequest{Name: name, Command: "sleep 300"})
}

// TestDiskFullRecordFirst: a start whose record cannot be written leaves no
// process of it behind, even when the monitor could start it (the log fits,
// the state does not).
func TestDiskFullRecordFirst(t *testing.T) {
	mnt, child := inPrivateTmpfs(t, "1m")
	if !child {
		return
	}
	stateDir := filepath.Join(mnt, "state")
	m := newTestManager(t, Config{StateDir: stateDir})
	// Logs elsewhere: the monitor starts the service, only the record fails.
	if err := os.Symlink(t.TempDir(), filepath.Join(stateDir, "logs2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.logDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(stateDir, "logs2"), m.logDir); err != nil {
		t.Fatal(err)
	}
	fill(t, mnt)
	name := uniqueName("rf")
	_, err := m.Start(t.Context(), apitype.StartServiceRequest{Name: name, Command: "setsid sleep 300 & ( ( sleep 300 & ) & ); sleep 300"})
	if err == nil || !strings.Contains(err.Error(), "save state") {
		t.Fatalf("Start with no room for the record = %v, want a save state error", err)
	}
	waitFor(t, "nothing of the unrecorded start", 5*time.Second, func() bool { return len(markedWith(ServiceEnv, name)) == 0 })
}
