package terminal

import (
	"errors"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
)

// Issue 28: MaxSessions abandoned v2 sessions locked every new terminal out
// for the grace period. At the cap, the session detached the longest is
// ended to make room; sessions with a viewer never are.
func TestCapShedsLongestDetachedSession(t *testing.T) {
	opts := testOptions(t)
	opts.MaxSessions = 3
	opts.Grace = time.Hour // nothing ends by its grace in this test
	opts.KillGrace = 100 * time.Millisecond
	m, url := newTestServer(t, opts)
	pidRE := regexp.MustCompile(`__P(\d+)__`)
	start := func(id string) (*client, int) {
		t.Helper()
		c := attachV2(t, url, Init{Session: id, Cols: 80, Rows: 24})
		c.send("echo __P$$__\r")
		pid, _ := strconv.Atoi(c.waitMatch(pidRE)[1])
		return c, pid
	}
	ids := func() []string {
		var out []string
		for _, s := range m.Sessions() {
			out = append(out, s.ID)
		}
		slices.Sort(out)
		return out
	}
	detach := func(c *client, id string) {
		t.Helper()
		c.c.CloseNow()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if s := m.Sessions(); slices.ContainsFunc(s, func(s apitype.TerminalSession) bool { return s.ID == id && s.Clients == 0 }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Sessions() = %+v: the closed connection never detached", m.Sessions())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	a, aPID := start("a")
	detach(a, "a")
	time.Sleep(20 * time.Millisecond) // a is detached longer than b
	b, bPID := start("b")
	detach(b, "b")
	live, _ := start("live")

	// Full: the fourth session sheds a, detached the longest.
	c, _ := start("c")
	waitGone(t, aPID)
	if got, want := ids(), []string{"b", "c", "live"}; !slices.Equal(got, want) {
		t.Fatalf("sessions after shedding = %v, want %v", got, want)
	}
	// Then b.
	d, _ := start("d")
	waitGone(t, bPID)
	if got, want := ids(), []string{"c", "d", "live"}; !slices.Equal(got, want) {
		t.Fatalf("sessions after shedding = %v, want %v", got, want)
	}
	// Every session has a viewer: nothing is shed, the next is refused.
	if _, err := m.Reserve(); !errors.Is(err, ErrTooManySessions) {
		t.Fatalf("Reserve with every session attached = %v, want ErrTooManySessions", err)
	}
	for _, cl := range []*client{live, c, d} {
		cl.send("echo __alive$((6*7))__\r")
		cl.waitFor("__alive42__")
	}
}
