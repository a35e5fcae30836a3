package local

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

// A command that exits before the reaper has subscribed to SIGCHLD (its signal went to
// nobody) is still answered: the reaper's first sweep collects it.
func TestReapCollectsChildExitedBeforeSubscription(t *testing.T) {
	in := &initServer{waiters: map[int]chan syscall.WaitStatus{}}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	fd := int(devNull.Fd())
	var res spawnRes
	res.pid, res.wait, res.err = in.start(spawnMsg{Argv0: "/bin/sh", Argv: []string{"sh", "-c", "exit 7"}}, [3]int{fd, fd, fd})
	if res.err != nil {
		t.Fatal(res.err)
	}
	// Wait until it is a zombie: exited, its SIGCHLD gone (nobody subscribed).
	for i := 0; ; i++ {
		st, err := procfs.ReadStat(res.pid)
		if err == nil && st.State == 'Z' {
			break
		}
		if i == 500 {
			syscall.Kill(res.pid, syscall.SIGKILL)
			t.Fatalf("child %d did not exit: %v %+v", res.pid, err, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	in.reap()
	select {
	case ws := <-res.wait:
		if ws.ExitStatus() != 7 {
			t.Fatalf("exit status %d, want 7", ws.ExitStatus())
		}
	default:
		t.Fatal("the exited child was not reaped by a sweep")
	}
}
