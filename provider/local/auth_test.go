package local

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// A process of another sandbox that reaches a sandbox's control socket (here through
// a mount of its directory, the way an unisolated host bind once exposed it) is
// refused: its root is not the engine's user.
func TestControlSocketRefusesStrangers(t *testing.T) {
	e := newTestEngine(t)
	a := createBox(t, e, engine.Spec{})
	b := createBox(t, e, engine.Spec{Mounts: []engine.Mount{{Source: e.sandboxDir(a.ID), Target: "/a", ReadOnly: true}}})
	script := `use IO::Socket::UNIX; $SIG{PIPE} = "IGNORE";
		my $s = IO::Socket::UNIX->new(Peer => "/a/control.sock") or die "connect: $!\n";
		print $s "{\"op\":\"exec\",\"argv\":[\"touch\",\"/tmp/pwned\"],\"cwd\":\"/\"}\n";
		my $n = sysread($s, my $buf, 100); print "read ", ($n // "error"), "\n";`
	out, _ := sh(t, e, b.ID, "perl", "-e", script)
	if r := strings.TrimSpace(out); r != "read 0" && r != "read error" {
		t.Errorf("a stranger on the control socket got %q, want it closed at once", out)
	}
	if _, err := e.Stat(t.Context(), a.ID, "/tmp/pwned"); err == nil {
		t.Error("a stranger ran a command through the control socket")
	}
	// The engine itself still gets in.
	if out, code := sh(t, e, a.ID, "echo", "ok"); code != 0 || out != "ok\n" {
		t.Errorf("the engine's exec = %q %d", out, code)
	}
}

func TestDataDirIsPrivateAndOfOneKind(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	e := newTestEngineAt(t, dir)
	defer e.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode = %v, %v, want 0700", fi.Mode().Perm(), err)
	}
	info := createBox(t, e, engine.Spec{})
	u, err := NewEngine(EngineOptions{DataDir: dir, Unisolated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if _, err := u.Create(t.Context(), engine.Spec{}); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("an unisolated sandbox beside isolated ones = %v", err)
	}
	// Reading stays open to both.
	if got, err := u.Get(t.Context(), info.ID); err != nil || got.State != engine.StateRunning {
		t.Errorf("get from the unisolated engine = %+v, %v", got, err)
	}
}

func newTestEngineAt(t *testing.T, dir string) *Engine {
	t.Helper()
	e, err := NewEngine(EngineOptions{DataDir: dir})
	if err != nil {
		t.Skip(err)
	}
	return e
}
