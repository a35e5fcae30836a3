package terminal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestV2SpawnsAtInitSize(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	cl := attachV2(t, url, Init{Session: "size", Cols: 132, Rows: 43})
	cl.send("echo __S$(stty size)__\r")
	cl.waitFor("__S43 132__")
	sendBinary(t, cl.c, AppendResize(nil, 100, 30))
	cl.send("echo __T$(stty size)__\r")
	cl.waitFor("__T30 100__")
}

// checkContiguous fails unless frames cover [from, …) without gap or overlap.
func checkContiguous(t *testing.T, frames []frame, from int64) int64 {
	t.Helper()
	for i, f := range frames {
		if f.offset != from {
			t.Fatalf("frame %d starts at offset %d, want %d", i, f.offset, from)
		}
		from += int64(len(f.data))
	}
	return from
}

// checkSequence fails unless out holds L1…Ln each exactly once, in order.
func checkSequence(t *testing.T, out string, n int) {
	t.Helper()
	got := regexp.MustCompile(`L(\d+)\r\n`).FindAllStringSubmatch(out, -1)
	if len(got) != n {
		t.Fatalf("got %d numbered lines, want %d", len(got), n)
	}
	for i, m := range got {
		if m[1] != strconv.Itoa(i+1) {
			t.Fatalf("line %d is L%s, want L%d", i, m[1], i+1)
		}
	}
}

func TestV2ResumeReplaysWithoutGapOrDuplicate(t *testing.T) {
	m, url := newTestServer(t, testOptions(t))
	const n = 3000
	a := attachV2(t, url, Init{Session: "resume", Cols: 80, Rows: 24})
	a.send(fmt.Sprintf("for i in $(seq 1 %d); do echo L$i; [ $((i%%300)) = 0 ] && sleep 0.1; done; echo __D$((1))__\r", n))
	a.waitFor("L300\r\n")
	a.c.CloseNow()
	a.waitClosed()
	a.mu.Lock()
	first := append([]frame(nil), a.frames...)
	a.mu.Unlock()
	have := checkContiguous(t, first, 0)
	var firstOut strings.Builder
	for _, f := range first {
		firstOut.Write(f.data)
	}

	// Output goes on while nobody is attached.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := m.Sessions()
		if len(s) == 1 && s[0].Clients == 0 && s[0].OutputBytes > have+100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output while detached: %+v (have %d)", s, have)
		}
		time.Sleep(10 * time.Millisecond)
	}

	b := attachV2(t, url, Init{Session: "resume", Cols: 80, Rows: 24, Offset: uint64(have)})
	if b.ready[1]&ReadyResumed == 0 {
		t.Errorf("ready flags = %#x, want resumed", b.ready[1])
	}
	if start := int64(binary.BigEndian.Uint64(b.ready[6:])); start != have {
		t.Errorf("replay starts at %d, want %d", start, have)
	}
	b.waitFor("__D1__")
	b.mu.Lock()
	second := append([]frame(nil), b.frames...)
	b.mu.Unlock()
	checkContiguous(t, second, have)
	checkSequence(t, firstOut.String()+b.output(), n)

	// A fresh client (offset 0) gets everything the ring kept, then live.
	c := attachV2(t, url, Init{Session: "resume", Cols: 80, Rows: 24})
	c.waitFor("__D1__")
	c.mu.Lock()
	checkContiguous(t, c.frames, 0)
	c.mu.Unlock()
	checkSequence(t, c.output(), n)
	c.send("echo __Z$((1))__\r")
	c.waitFor("__Z1__")
}

func TestV2SecondViewerSeesSameOutput(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	a := attachV2(t, url, Init{Session: "two", Cols: 80, Rows: 24})
	a.send("echo __A$((1))__\r")
	a.waitFor("__A1__")
	b := attachV2(t, url, Init{Session: "two", Cols: 80, Rows: 24, Offset: uint64(a.end())})
	b.send("for i in $(seq 1 500); do echo L$i; done\r")
	outA := a.waitFor("L500\r\n")
	outB := b.waitFor("L500\r\n")
	// Both streams are contiguous, a's from offset 0: b's bytes are a's
	// bytes at the same offsets.
	a.mu.Lock()
	checkContiguous(t, a.frames, 0)
	a.mu.Unlock()
	b.mu.Lock()
	start := b.frames[0].offset
	checkContiguous(t, b.frames, start)
	b.mu.Unlock()
	n := min(len(outA)-int(start), len(outB))
	if outA[start:int(start)+n] != outB[:n] {
		t.Errorf("viewer b's output differs from viewer a's at the same offsets")
	}
	checkSequence(t, outB, 500)
}

func TestV2ReplayRepliesAreNotTyped(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	a := attachV2(t, url, Init{Session: "reply", Cols: 80, Rows: 24})
	a.send("printf '\\033[c'; echo __Q$((1))__\r")
	a.waitFor("__Q1__")
	a.c.CloseNow()
	a.waitClosed()

	b := attachV2(t, url, Init{Session: "reply", Cols: 80, Rows: 24})
	b.waitFor("__Q1__")
	live := int64(binary.BigEndian.Uint64(b.ready[14:]))
	// What a terminal answers while it processes the replay (offset before
	// live) is dropped; input after the replay is typed.
	sendBinary(t, b.c, AppendInput(nil, uint64(live-1), []byte("echo __BAD$((1))__\r")))
	sendBinary(t, b.c, AppendInput(nil, uint64(live), []byte("echo __OK$((1))__\r")))
	out := b.waitFor("__OK1__")
	if strings.Contains(out, "BAD") {
		t.Errorf("a reply to replayed output was typed into the shell:\n%s", out)
	}
}

func TestV2AbandonedSessionEndsAfterGrace(t *testing.T) {
	opts := testOptions(t)
	opts.Grace = 300 * time.Millisecond
	opts.KillGrace = 100 * time.Millisecond
	m, url := newTestServer(t, opts)
	a := attachV2(t, url, Init{Session: "grace", Cols: 80, Rows: 24})
	a.send("sleep 1000 & echo __P$$:$!:__\r")
	match := a.waitMatch(regexp.MustCompile(`__P(\d+):(\d+):__`))
	shell, _ := strconv.Atoi(match[1])
	job, _ := strconv.Atoi(match[2])
	if s := m.Sessions(); len(s) != 1 || s[0].PID != shell || s[0].ID != "grace" || s[0].Clients != 1 || s[0].Protocol != "v2" {
		t.Fatalf("Sessions() = %+v, want grace with pid %d and one client", s, shell)
	}
	a.c.CloseNow()
	waitGone(t, shell, job)
	deadline := time.Now().Add(10 * time.Second)
	for len(m.Sessions()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Sessions() = %+v after grace, want none", m.Sessions())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestV2ExitCodeInCloseFrame(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	a := attachV2(t, url, Init{Session: "exit", Cols: 80, Rows: 24})
	b := attachV2(t, url, Init{Session: "exit", Cols: 80, Rows: 24})
	a.send("exit 7\r")
	for _, cl := range []*client{a, b} {
		err := cl.waitClosed()
		var ce websocket.CloseError
		if !asCloseError(err, &ce) || ce.Code != websocket.StatusNormalClosure || ce.Reason != "exit:7" {
			t.Errorf("close = %v, want 1000 exit:7", err)
		}
		if cl.exit == nil || *cl.exit != 7 {
			t.Errorf("exit frame = %v, want 7", cl.exit)
		}
	}
}

func TestV2BadInitClosesWithProtocolError(t *testing.T) {
	_, url := newTestServer(t, testOptions(t))
	for _, in := range [][]byte{
		{FrameInput, 0, 0, 0, 0, 0, 0, 0, 0, 'x'},
		AppendInit(nil, Init{Session: "../x", Cols: 80, Rows: 24}),
		AppendInit(nil, Init{Session: "ok", Cols: 0, Rows: 24}),
	} {
		c := dial(t, url, true)
		sendBinary(t, c, in)
		cl := startClient(t, c, true)
		if got := websocket.CloseStatus(cl.waitClosed()); got != websocket.StatusProtocolError {
			t.Errorf("init %q: close status = %v, want 1002", in, got)
		}
	}
}

// TestV2SlowViewerDoesNotGrowMemory floods the terminal with `yes` for 5 s
// while one viewer reads nothing: the heap stays bounded and the other
// viewer keeps receiving.
func TestV2SlowViewerDoesNotGrowMemory(t *testing.T) {
	opts := testOptions(t)
	opts.StallTimeout = 200 * time.Millisecond
	_, url := newTestServer(t, opts)
	fast := attachV2Discard(t, url, Init{Session: "flood", Cols: 80, Rows: 24})
	// The slow viewer sends init and then never reads.
	slow := dial(t, url, true)
	sendBinary(t, slow, AppendInit(nil, Init{Session: "flood", Cols: 80, Rows: 24}))

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	const bound = 16 << 20

	fast.send("timeout 5 yes; echo __Y$((1))__\r")
	var peak uint64
	var received []int
	deadline := time.Now().Add(9 * time.Second)
	for !strings.Contains(tail(fast), "__Y1__") {
		if time.Now().After(deadline) {
			t.Fatal("flood did not end")
		}
		time.Sleep(500 * time.Millisecond)
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapAlloc)
		fast.mu.Lock()
		received = append(received, int(fast.n))
		fast.mu.Unlock()
	}
	if peak > base+bound {
		t.Errorf("heap peaked at %d MiB, base %d MiB: more than %d MiB growth", peak>>20, base>>20, bound>>20)
	}
	// The reading viewer received data throughout, not just at the end.
	if len(received) < 6 {
		t.Fatalf("only %d samples", len(received))
	}
	// Every second of the flood (two samples) brought the fast viewer data.
	for i := 2; i < 10 && i < len(received); i++ {
		if received[i] <= received[i-2] {
			t.Errorf("fast viewer stalled between samples %d and %d: %v", i-2, i, received)
		}
	}
	fast.mu.Lock()
	got := fast.n
	fast.mu.Unlock()
	t.Logf("heap base %d KiB peak %d KiB; fast viewer got %d MB", base>>10, peak>>10, got>>20)

	// The slow viewer was left behind, not wedged: once it reads, it skips
	// ahead (its offsets jump) and gets the end of the output.
	late := startClientDiscard(t, slow, true, false)
	late.waitFor("__Y1__")
	late.mu.Lock()
	defer late.mu.Unlock()
	jumped := false
	for i := 1; i < len(late.frames); i++ {
		prev := late.frames[i-1]
		switch f := late.frames[i]; {
		case f.offset < prev.offset+int64(len(prev.data)):
			t.Fatalf("slow viewer: frame %d at offset %d overlaps the previous one", i, f.offset)
		case f.offset > prev.offset+int64(len(prev.data)):
			jumped = true
		}
	}
	if !jumped {
		t.Errorf("slow viewer got every byte of a 5 s flood; expected it to be left behind")
	}
}

func TestV2PingDropsDeadClient(t *testing.T) {
	opts := testOptions(t)
	opts.PingInterval = 300 * time.Millisecond
	m, url := newTestServer(t, opts)
	alive := attachV2(t, url, Init{Session: "ping", Cols: 80, Rows: 24})
	// The dead client never reads, so it never answers a ping.
	dead := dial(t, url, true)
	sendBinary(t, dead, AppendInit(nil, Init{Session: "ping", Cols: 80, Rows: 24}))
	deadline := time.Now().Add(10 * time.Second)
	sawTwo := false
	for {
		s := m.Sessions()
		if len(s) == 1 && s[0].Clients == 2 {
			sawTwo = true
		}
		if sawTwo && len(s) == 1 && s[0].Clients == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sessions() = %+v: the client that answers no ping was not dropped", s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second) // several ping intervals
	alive.send("echo __A$((1))__\r")
	alive.waitFor("__A1__")
}

// tail returns the last bytes received; the full output may be large.
func tail(cl *client) string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	b := cl.out.Bytes()
	return string(b[max(0, len(b)-256):])
}

// Reservations count against MaxSessions with the live sessions; a v2
// connection that resumes its session gives its reservation back.
func TestSessionCap(t *testing.T) {
	opts := testOptions(t)
	opts.MaxSessions = 2
	m, url := newTestServer(t, opts)
	a := attachV2(t, url, Init{Session: "a", Cols: 80, Rows: 24})
	a.send("echo A-$((1+1))\r")
	a.waitFor("A-2")
	r, err := m.Reserve()
	if err != nil {
		t.Fatalf("Reserve with 1 of 2 sessions: %v", err)
	}
	if _, err := m.Reserve(); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("Reserve past the cap = %v, want ErrTooManySessions", err)
	}
	// A refused connection is closed with 1013 naming the limit.
	c := dial(t, url, true)
	_, _, err = c.Read(t.Context())
	var ce websocket.CloseError
	if !asCloseError(err, &ce) || ce.Code != 1013 || !strings.Contains(ce.Reason, "limit is 2") {
		t.Fatalf("connection past the cap ended with %v, want close 1013 naming the limit", err)
	}
	r.Release()
	r.Release() // twice is harmless
	if len(m.Sessions()) != 1 {
		t.Fatalf("sessions = %d, want 1", len(m.Sessions()))
	}
	// Resuming "a" at the cap's edge leaves room for one more.
	b := attachV2(t, url, Init{Session: "a", Cols: 80, Rows: 24})
	b.send("echo B-$((2+2))\r")
	b.waitFor("B-4")
	r, err = m.Reserve()
	if err != nil {
		t.Fatalf("Reserve after a resume: %v", err)
	}
	r.Release()
}
