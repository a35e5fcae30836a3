package local

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/volume"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestLimitsDefaultsAndRefusals(t *testing.T) {
	e := newTestEngine(t)
	info := createBox(t, e, engine.Spec{})
	want := engine.Limits{MemoryBytes: rules.DefaultMemoryBytes, Pids: rules.DefaultPids, DiskBytes: rules.DefaultDiskBytes}
	if !e.cg.Controls("memory") {
		want.MemoryBytes = 0
	}
	if !e.cg.Controls("pids") {
		want.Pids = 0
	}
	if info.Applied != want {
		t.Errorf("applied by default = %+v, want %+v", info.Applied, want)
	}
	if out, _ := sh(t, e, info.ID, "bash", "-c", "df -B1 --output=size /home/user | tail -1"); !strings.HasPrefix(strings.TrimSpace(out), "10") {
		t.Errorf("size of the home's file system = %q, want about 10 GiB", out)
	}
	for _, tc := range []struct {
		name string
		spec engine.Spec
		want error
	}{
		{"a disk too small for ext4", engine.Spec{Limits: engine.Limits{DiskBytes: 1 << 20}}, engine.ErrLimit},
		{"negative memory", engine.Spec{Limits: engine.Limits{MemoryBytes: -1}}, engine.ErrLimit},
		{"an unknown runtime", engine.Spec{Runtime: "firecracker"}, engine.ErrUnsupported},
		{"gvisor", engine.Spec{Runtime: "gvisor"}, engine.ErrUnsupported},
	} {
		if _, err := e.Create(t.Context(), tc.spec); !errors.Is(err, tc.want) {
			t.Errorf("create with %s = %v, want %v", tc.name, err, tc.want)
		}
	}
	u, err := NewEngine(EngineOptions{DataDir: t.TempDir(), Unisolated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Create(t.Context(), engine.Spec{Limits: engine.Limits{DiskBytes: 1 << 30}}); !errors.Is(err, engine.ErrLimit) {
		t.Errorf("a disk limit on an unisolated sandbox = %v, want ErrLimit", err)
	}
}

// --memory 256M: a process allocating 400 MB is killed, init and the other processes
// of the sandbox live on (on every root kind).
func TestLimitsMemoryKillsTheHog(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testMemoryLimit(t, k) })
	}
}

func testMemoryLimit(t *testing.T, k rootKind) {
	e, base := k.engine(t)
	info := k.create(t, e, base, engine.Spec{Limits: engine.Limits{MemoryBytes: 256 << 20}})
	if info.Applied.MemoryBytes != 256<<20 {
		t.Fatalf("applied %+v", info.Applied)
	}
	if _, err := e.StartDetached(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	out, code := sh(t, e, info.ID, "perl", "-e", `$x = "a" x (400*1024*1024); print "survived\n"`)
	if code == 0 || strings.Contains(out, "survived") {
		t.Errorf("a 400 MB allocation under 256 MiB: exit %d %q", code, out)
	}
	if out, code := sh(t, e, info.ID, "bash", "-c", "pgrep -x sleep >/dev/null && echo alive"); code != 0 || out != "alive\n" {
		t.Errorf("after the OOM kill: %q (exit %d)", out, code)
	}
}

// --pids 200: a fork bomb ends at the limit; the host is unaffected (on every root
// kind).
func TestLimitsPidsContainForkBomb(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testForkBomb(t, k) })
	}
}

func testForkBomb(t *testing.T, k rootKind) {
	e, base := k.engine(t)
	info := k.create(t, e, base, engine.Spec{Limits: engine.Limits{Pids: 200, CPUMillis: 500}})
	if info.Applied.Pids != 200 || e.cg.Controls("cpu") && info.Applied.CPUMillis != 500 {
		t.Fatalf("applied %+v", info.Applied)
	}
	bx, _ := e.lookup(info.ID)
	var current string
	for _, g := range bx.st.Cgroups {
		if _, err := os.Stat(filepath.Join(g, "pids.current")); err == nil {
			current = filepath.Join(g, "pids.current")
		}
	}
	if current == "" {
		t.Skip("no pids cgroup")
	}
	if _, err := e.StartDetached(t.Context(), info.ID, engine.ExecRequest{Argv: []string{"bash", "-c", "f() { f | f & }; f"}}); err != nil {
		t.Fatal(err)
	}
	peak := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && peak < 195; time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(current)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		peak = max(peak, n)
	}
	if peak > 200 || peak < 150 {
		t.Errorf("processes of the fork bomb peaked at %d, want up to the limit of 200", peak)
	}
	start := time.Now()
	if err := exec0("true"); err != nil {
		t.Errorf("the host cannot start a process during the bomb: %v", err)
	}
	t.Logf("peak %d, host fork+exec %v", peak, time.Since(start))
}

func exec0(prog string) error {
	pid, err := syscall.ForkExec("/bin/"+prog, []string{prog}, &syscall.ProcAttr{})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, err = syscall.Wait4(pid, &ws, 0, nil)
	return err
}

// A sandbox's writes end at its disk: ENOSPC inside, no more than that on the host.
// On an image the home is in the overlay, whose upper layer is on that disk. (The
// GiB case runs on the default root only: the disk is the same mechanism.)
func TestLimitsDisk(t *testing.T) {
	for _, tc := range []struct {
		name          string
		kind          rootKind
		disk, writeMB int64
	}{
		{"64 MiB", rootKinds[0], 64 << 20, 128},
		{"64 MiB image", rootKinds[1], 64 << 20, 128},
		{"1 GiB (acceptance)", rootKinds[0], 1 << 30, 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.disk > 64<<20 {
				t.Skip("writes a GiB")
			}
			e, base := tc.kind.engine(t)
			info := tc.kind.create(t, e, base, engine.Spec{Limits: engine.Limits{DiskBytes: tc.disk}})
			if info.Applied.DiskBytes != tc.disk {
				t.Errorf("applied %+v", info.Applied)
			}
			out, code := sh(t, e, info.ID, "bash", "-c", "dd if=/dev/zero of=/home/user/big bs=1M count="+strconv.FormatInt(tc.writeMB, 10)+" 2>&1")
			if code == 0 || !strings.Contains(out, "No space left on device") {
				t.Errorf("writing %d MB to a %d-byte disk: exit %d %q", tc.writeMB, tc.disk, code, out)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(e.sandboxDir(info.ID), volume.DiskImage), &st); err != nil {
				t.Fatal(err)
			}
			if used := st.Blocks * 512; used > tc.disk {
				t.Errorf("the disk uses %d bytes of the host's, more than its %d", used, tc.disk)
			}
		})
	}
}
