package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// TestCreateLeavesCallerDescriptorsOutside: `sandboxctl create 9<dir 251<file`, run
// as a real child process as a shell would, gives no process of the sandbox either
// descriptor: not a command (ls -l /proc/self/fd), not init (/proc/1/fd), not any
// process root inside can read, nor any process of the sandbox's pid namespace as the
// host sees it.
func TestCreateLeavesCallerDescriptorsOutside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("isolated sandboxes of the local engine need root on the host")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (Debian package runc): the local engine's sandboxes run on it")
	}
	requireNamespaces(t)
	bins := testutil.Commands(t, "sandboxctl", "sandbox-mcp", "proliferate")
	probe := filepath.Join(t.TempDir(), "probe")
	build := exec.Command("go", "build", "-o", probe, "../../provider/local/testdata/hostile/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the probe: %v\n%s", err, out)
	}

	word := make([]byte, 6)
	rand.Read(word)
	mark := "hostile-fd-" + hex.EncodeToString(word)
	dir := filepath.Join(t.TempDir(), mark+"-dir")
	file := filepath.Join(dir, mark+"-file")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	data := t.TempDir()
	t.Cleanup(func() { cleanupSandboxes(data) })
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "SANDBOXCTL_DATA_DIR=" + data,
		"SANDBOXCTL_SANDBOX_MCP=" + filepath.Join(bins, "sandbox-mcp"), "SANDBOXCTL_PROLIFERATE=" + filepath.Join(bins, "proliferate"),
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1"}
	ctl := func(extra []*os.File, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(bins, "sandboxctl"), args...)
		cmd.Env, cmd.ExtraFiles, cmd.WaitDelay = env, extra, 10*time.Second
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			err = fmt.Errorf("sandboxctl %q: %v\nstdout: %s\nstderr: %s", args, err, stdout.String(), stderr.String())
		}
		return stdout.String(), err
	}

	// ExtraFiles[i] is fd 3+i in the child: the directory at 9, the file at 251.
	extra := make([]*os.File, 249)
	extra[9-3], extra[251-3] = d, f
	out, err := ctl(extra, "--json", "create")
	if err != nil {
		t.Fatal(err)
	}
	var res provider.CreateResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.SandboxID == "" {
		t.Fatalf("create --json = %q, %v", out, err)
	}
	id := res.SandboxID

	out, err = ctl(nil, "exec", id, "--", "sh", "-c", "ls -l /proc/self/fd; echo ---; ls -l /proc/1/fd 2>&1; true")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, mark) {
		t.Errorf("a descriptor inside names the host's %s or %s:\n%s", dir, file, out)
	}
	self, _, _ := strings.Cut(out, "---")
	for _, line := range strings.Split(self, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || fields[len(fields)-2] != "->" {
			continue
		}
		switch fd := fields[len(fields)-3]; fd {
		case "0", "1", "2", "3": // the streams, and ls's own directory
		default:
			t.Errorf("a command inside holds fd %s: %s", fd, line)
		}
	}

	if _, err := ctl(nil, "cp", probe, id+":/tmp/hostile-probe"); err != nil {
		t.Fatal(err)
	}
	out, err = ctl(nil, "exec", id, "--", "sh", "-c", "chmod 755 /tmp/hostile-probe && /tmp/hostile-probe fds "+mark)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "ok fds ") {
		t.Errorf("the probe's scan of every descriptor inside did not finish:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "BROKEN ") {
			t.Errorf("inside, as root: %s", line)
		}
	}

	// The host sees every process of the sandbox, readable inside or not.
	out, err = ctl(nil, "exec", id, "--", "readlink", "/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	pidNS := strings.TrimSpace(out)
	var dst, fst syscall.Stat_t
	if err := syscall.Stat(dir, &dst); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(file, &fst); err != nil {
		t.Fatal(err)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	members := 0
	for _, p := range procs {
		if ns, _ := os.Readlink(p + "/ns/pid"); ns != pidNS {
			continue
		}
		members++
		comm, _ := os.ReadFile(p + "/comm")
		ents, _ := os.ReadDir(p + "/fd")
		for _, ent := range ents {
			var st syscall.Stat_t
			if syscall.Stat(p+"/fd/"+ent.Name(), &st) != nil {
				continue
			}
			target, _ := os.Readlink(p + "/fd/" + ent.Name())
			if (st.Dev == dst.Dev && st.Ino == dst.Ino) || (st.Dev == fst.Dev && st.Ino == fst.Ino) {
				t.Errorf("sandbox process %s (%s) holds fd %s -> %s: sandboxctl's caller's descriptor", filepath.Base(p), strings.TrimSpace(string(comm)), ent.Name(), target)
			}
		}
	}
	if members == 0 {
		t.Errorf("no host process is in the sandbox's pid namespace %q", pidNS)
	}
	if _, err := ctl(nil, "terminate", id); err != nil {
		t.Error(err)
	}
}
