package terminal

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/creack/pty"
)

func TestV1Echo(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	cl := startClient(t, dial(t, url, false), false)
	cl.send("echo __M$((40+2))__\r")
	cl.waitFor("__M42__")
}

func TestV1SpawnsAt80x24AndResizes(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	cl := startClient(t, dial(t, url, false), false)
	cl.send("echo __A$(stty size)__\r")
	cl.waitFor("__A24 80__")
	cl.send(`{"type":"resize","cols":132,"rows":43}`)
	cl.send("echo __B$(stty size)__\r")
	cl.waitFor("__B43 132__")
	// Not a resize (cols is a string): typed as keystrokes.
	cl.send(`{"type":"resize","cols":"x","rows":5}`)
	cl.send("\r")
	cl.waitFor(`"cols":"x"`)
}

// TestV1MultiByteOutput checks that 2 MB of mixed 2-, 3- and 4-byte UTF-8
// arrive byte-identical, with every text frame valid UTF-8 on its own.
func TestV1MultiByteOutput(t *testing.T) {
	opts := testOptions(t)
	_, url := newTestServer(t, opts)
	runes := []rune("aé€𝄞ж中😀ß")
	var sb strings.Builder
	r := rand.New(rand.NewPCG(1, 2))
	for sb.Len() < 2_000_000 {
		sb.WriteRune(runes[r.IntN(len(runes))])
	}
	want := sb.String()
	if err := os.WriteFile(filepath.Join(opts.Dir, "big.txt"), []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := startClient(t, dial(t, url, false), false)
	cl.send("echo __B$((1))__; cat big.txt; echo __E$((1))__\r")
	out := cl.waitFor("__E1__\r\n")
	_, after, ok := strings.Cut(out, "__B1__\r\n")
	if !ok {
		t.Fatal("no start marker")
	}
	got, _, _ := strings.Cut(after, "__E1__")
	if got != want {
		t.Errorf("output differs: got %d bytes, want %d", len(got), len(want))
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for i, f := range cl.frames {
		if !utf8.Valid(f.data) {
			t.Fatalf("frame %d (%d bytes) is not valid UTF-8", i, len(f.data))
		}
	}
}

func TestV1PasteOneMiB(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	cl := startClient(t, dial(t, url, false), false)
	cl.send("stty -echo; echo __R$((1))__; cat > paste.txt\r")
	cl.waitFor("__R1__")
	line := strings.Repeat("a", 1023) + "\n"
	paste := strings.Repeat(line, 1024)
	if len(paste) != 1<<20 {
		t.Fatalf("paste is %d bytes", len(paste))
	}
	cl.send(paste) // one frame
	cl.send("\x04")
	cl.send("echo __W$(wc -c < paste.txt)__\r")
	cl.waitFor("__W1048576__")
}

// TestV1CloseKillsEverything starts jobs in other process groups, one of
// them deaf to SIGHUP, and checks that closing the socket ends them all.
func TestV1CloseKillsEverything(t *testing.T) {
	opts := testOptions(t)
	opts.KillGrace = 200 * time.Millisecond
	m, url := newTestServer(t, opts)
	c := dial(t, url, false)
	cl := startClient(t, c, false)
	cl.send("sleep 1000 & a=$!; (trap '' HUP; exec sleep 1001) & b=$!; echo __P$$:$a:$b:__\r")
	match := cl.waitMatch(regexp.MustCompile(`__P(\d+):(\d+):(\d+):__`))
	var pids []int
	for _, s := range match[1:] {
		pid, _ := strconv.Atoi(s)
		pids = append(pids, pid)
	}
	if len(m.Sessions()) != 1 {
		t.Fatalf("Sessions() = %v, want one session", m.Sessions())
	}
	c.Close(websocket.StatusNormalClosure, "bye")
	waitGone(t, pids...)
	deadline := time.Now().Add(10 * time.Second)
	for len(m.Sessions()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Sessions() = %v after close, want none", m.Sessions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestV1ExitClosesWithPTYExited(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	cl := startClient(t, dial(t, url, false), false)
	cl.send("echo __X$((1))__; exit 3\r")
	err := cl.waitClosed()
	if got := websocket.CloseStatus(err); got != websocket.StatusNormalClosure {
		t.Errorf("close status = %v (%v), want 1000", got, err)
	}
	var ce websocket.CloseError
	if !asCloseError(err, &ce) || ce.Reason != V1ExitReason {
		t.Errorf("close = %v, want reason %q", err, V1ExitReason)
	}
	if !strings.Contains(cl.output(), "__X1__") {
		t.Errorf("output before exit lost: %q", cl.output())
	}
}

func TestV1SpawnFailureCloses1011(t *testing.T) {
	opts := testOptions(t)
	opts.Command = []string{filepath.Join(opts.Dir, "no-such-shell")}
	_, url := newTestServer(t, opts)
	cl := startClient(t, dial(t, url, false), false)
	err := cl.waitClosed()
	if got := websocket.CloseStatus(err); got != websocket.StatusInternalError {
		t.Errorf("close status = %v (%v), want 1011", got, err)
	}
}

// TestV1CloseWhileInputBlocked closes the socket while a paste is stuck
// behind a foreground program that reads nothing.
func TestV1CloseWhileInputBlocked(t *testing.T) {
	opts := testOptions(t)
	opts.KillGrace = 100 * time.Millisecond
	m, url := newTestServer(t, opts)
	c := dial(t, url, false)
	cl := startClient(t, c, false)
	cl.send("echo __P$$:__; sleep 1000\r")
	match := cl.waitMatch(regexp.MustCompile(`__P(\d+):__`))
	shell, _ := strconv.Atoi(match[1])
	for range 4 {
		cl.send(strings.Repeat("x", 256<<10))
	}
	c.CloseNow()
	waitGone(t, shell)
	deadline := time.Now().Add(10 * time.Second)
	for len(m.Sessions()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Sessions() = %v after close, want none", m.Sessions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCloseKillsEverySession(t *testing.T) {
	opts := testOptions(t)
	opts.KillGrace = 100 * time.Millisecond
	m, url := newTestServer(t, opts)
	var pids []int
	for _, id := range []string{"one", "two"} {
		cl := attachV2(t, url, Init{Session: id, Cols: 80, Rows: 24})
		cl.send("sleep 1000 & echo __P$$:$!:__\r")
		match := cl.waitMatch(regexp.MustCompile(`__P(\d+):(\d+):__`))
		for _, s := range match[1:] {
			pid, _ := strconv.Atoi(s)
			pids = append(pids, pid)
		}
		cl.c.CloseNow()
	}
	if n := len(m.Sessions()); n != 2 {
		t.Fatalf("%d sessions before Close, want 2 (detached sessions live on)", n)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("process %d survived Close", pid)
		}
	}
	if n := len(m.Sessions()); n != 0 {
		t.Errorf("%d sessions after Close, want 0", n)
	}
	c := dial(t, url, true)
	sendBinary(t, c, AppendInit(nil, Init{Session: "late", Cols: 80, Rows: 24}))
	cl := startClient(t, c, true)
	if got := websocket.CloseStatus(cl.waitClosed()); got != websocket.StatusGoingAway {
		t.Errorf("connect after Close: close status %v, want 1001", got)
	}
}

// readNow never waits: the PTY's descriptor is in blocking mode, and a read
// that waited for more output would hold back what was already read.
func TestReadNowDoesNotWait(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); f.Close() }()
	raw, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int, 1)
	go func() { done <- readNow(raw, make([]byte, 4096)) }()
	select {
	case n := <-done:
		if n != 0 {
			t.Fatalf("readNow on a silent PTY = %d, want 0", n)
		}
	case <-time.After(10 * time.Second):
		// Unblock the stuck read so the test can end.
		_ = cmd.Process.Kill()
		f.Close()
		t.Fatal("readNow waited for output")
	}
}
