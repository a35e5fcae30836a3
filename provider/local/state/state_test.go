package state

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func TestSaveLoad(t *testing.T) {
	sd := t.TempDir()
	code := 3
	want := Record{ID: "sb-1", Name: "n", Created: time.Now().UTC().Truncate(time.Second), Isolated: true,
		Spec: engine.Spec{Ports: []int{4000}, Volumes: []engine.VolumeMount{{Name: "v", Target: "/data"}}},
		Pid:  42, PidStart: 7, Cgroups: []string{"/sys/fs/cgroup/x"}, ExitCode: &code, SecretEnv: []string{"A=placeholder"}}
	if Exists(sd) {
		t.Fatal("Exists before Save = true")
	}
	if err := Save(sd, want); err != nil {
		t.Fatal(err)
	}
	if !Exists(sd) {
		t.Fatal("Exists after Save = false")
	}
	got, err := Load(sd, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Load after Save (-want +got):\n%s", diff)
	}
	if fi, err := os.Stat(filepath.Join(sd, File)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if _, err := Load(sd, "sb-2"); err == nil {
		t.Error("Load of another sandbox's record succeeded")
	}
	if err := os.WriteFile(filepath.Join(sd, File), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(sd, "sb-1"); err == nil {
		t.Error("Load of a torn record succeeded")
	}
}

func TestReadExitCode(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       *int
	}{
		{"none", "", nil},
		{"zero", "0", ptr(0)},
		{"newline", "124\n", ptr(124)},
		{"garbage", "x", nil},
	} {
		sd := t.TempDir()
		if tt.file != "" {
			if err := os.WriteFile(filepath.Join(sd, ExitFile), []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if got := ReadExitCode(sd); !cmp.Equal(got, tt.want) {
			t.Errorf("%s: ReadExitCode(%q) = %v, want %v", tt.name, tt.file, deref(got), deref(tt.want))
		}
	}
}

func TestWriteExitCode(t *testing.T) {
	sd := t.TempDir()
	if err := WriteExitCode(sd, 137); err != nil {
		t.Fatal(err)
	}
	if got := ReadExitCode(sd); got == nil || *got != 137 {
		t.Errorf("ReadExitCode after WriteExitCode(137) = %v, want 137", deref(got))
	}
}

// TestAlive: a live process is alive only under its own start time, and a reaped one
// is not.
func TestAlive(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	start, _, ok := ProcStart(pid)
	if !ok {
		t.Fatalf("ProcStart(%d) found nothing", pid)
	}
	if r := (Record{Pid: pid, PidStart: start}); !r.InitAlive() {
		t.Error("InitAlive of a running init = false")
	}
	if r := (Record{Pid: pid, PidStart: start + 1}); r.InitAlive() {
		t.Error("InitAlive under another start time (a reused pid) = true")
	}
	if r := (Record{ShimPid: pid, ShimStart: start}); !r.ShimAlive() || r.InitAlive() {
		t.Error("ShimAlive/InitAlive of a record with only a live shim are wrong")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if r := (Record{Pid: pid, PidStart: start}); r.InitAlive() {
		t.Error("InitAlive of a reaped init = true")
	}
}

func ptr(n int) *int { return &n }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
