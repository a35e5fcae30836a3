package terminal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/proliferate-ai/sandbox-mcp/procfs"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testOptions runs a plain bash without rc files, so prompts and aliases of
// the machine do not matter.
func testOptions(t testing.TB) Options {
	return Options{
		Dir:     t.TempDir(),
		Command: []string{"bash", "--norc", "--noprofile"},
		Env:     append(os.Environ(), "PS1=$ "),
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// newTestServer serves m over WebSocket the way internal/api does (the api
// package has its own end-to-end tests through the router).
func newTestServer(t testing.TB, opts Options) (*Manager, string) {
	t.Helper()
	m, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
			Subprotocols:    []string{SubprotocolV2},
			CompressionMode: websocket.CompressionDisabled,
		})
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(MaxMessage)
		if c.Subprotocol() == SubprotocolV2 {
			_ = m.ServeV2(r.Context(), wsConn{c})
		} else {
			_ = m.ServeV1(r.Context(), wsConn{c})
		}
	}))
	t.Cleanup(func() {
		_ = m.Close()
		ts.Close()
	})
	return m, "ws" + strings.TrimPrefix(ts.URL, "http")
}

func dial(t testing.TB, url string, v2 bool) *websocket.Conn {
	t.Helper()
	var opts websocket.DialOptions
	if v2 {
		opts.Subprotocols = []string{SubprotocolV2}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c.SetReadLimit(MaxMessage)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// client collects what one connection receives.
type client struct {
	t  testing.TB
	c  *websocket.Conn
	v2 bool

	mu     sync.Mutex
	cond   *sync.Cond
	out    bytes.Buffer
	frames []frame
	ready  []byte
	exit   *int32
	closed error
	// discard keeps only the last 4 KiB of output and the byte count n, for
	// tests that stream a lot.
	discard bool
	n       int64
	lastEnd int64
}

type frame struct {
	text   bool
	offset int64
	data   []byte
}

// startClient reads c in the background until it closes.
func startClient(t testing.TB, c *websocket.Conn, v2 bool) *client {
	return startClientDiscard(t, c, v2, false)
}

func startClientDiscard(t testing.TB, c *websocket.Conn, v2, discard bool) *client {
	cl := &client{t: t, c: c, v2: v2, discard: discard}
	cl.cond = sync.NewCond(&cl.mu)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			typ, p, err := c.Read(context.Background())
			cl.mu.Lock()
			if err != nil {
				cl.closed = err
				cl.cond.Broadcast()
				cl.mu.Unlock()
				return
			}
			switch {
			case cl.discard && len(p) > outputHeader && p[0] == FrameOutput:
				cl.n += int64(len(p) - outputHeader)
				cl.lastEnd = int64(binary.BigEndian.Uint64(p[1:])) + int64(len(p)-outputHeader)
				cl.out.Write(p[outputHeader:])
				if cl.out.Len() > 8<<10 {
					b := cl.out.Bytes()
					keep := append([]byte(nil), b[len(b)-4<<10:]...)
					cl.out.Reset()
					cl.out.Write(keep)
				}
			case typ == websocket.MessageText:
				cl.frames = append(cl.frames, frame{text: true, data: p})
				cl.out.Write(p)
			case len(p) > 0 && p[0] == FrameOutput && len(p) >= outputHeader:
				f := frame{offset: int64(binary.BigEndian.Uint64(p[1:])), data: p[outputHeader:]}
				cl.frames = append(cl.frames, f)
				cl.out.Write(f.data)
			case len(p) > 0 && p[0] == FrameReady:
				cl.ready = p
			case len(p) == 5 && p[0] == FrameExit:
				code := int32(binary.BigEndian.Uint32(p[1:]))
				cl.exit = &code
			}
			cl.cond.Broadcast()
			cl.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		c.CloseNow()
		<-done
	})
	return cl
}

// waitFor waits until the output contains s and returns the output so far.
func (cl *client) waitFor(s string) string {
	cl.t.Helper()
	return cl.wait(func() bool { return strings.Contains(cl.out.String(), s) }, "output containing "+strconv.Quote(s))
}

func (cl *client) waitClosed() error {
	cl.t.Helper()
	cl.wait(func() bool { return cl.closed != nil }, "close")
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.closed
}

func (cl *client) wait(cond func() bool, what string) string {
	cl.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	timer := time.AfterFunc(time.Until(deadline), func() {
		cl.mu.Lock()
		cl.cond.Broadcast()
		cl.mu.Unlock()
	})
	defer timer.Stop()
	cl.mu.Lock()
	defer cl.mu.Unlock()
	for !cond() {
		if time.Now().After(deadline) {
			out := cl.out.String()
			if len(out) > 2000 {
				out = "…" + out[len(out)-2000:]
			}
			cl.t.Fatalf("timed out waiting for %s; closed=%v; output:\n%s", what, cl.closed, out)
		}
		if cl.closed != nil && what != "close" {
			cl.t.Fatalf("connection closed (%v) while waiting for %s; output:\n%s", cl.closed, what, cl.out.String())
		}
		cl.cond.Wait()
	}
	return cl.out.String()
}

// waitMatch waits until the output matches re and returns the submatches.
func (cl *client) waitMatch(re *regexp.Regexp) []string {
	cl.t.Helper()
	out := cl.wait(func() bool { return re.MatchString(cl.out.String()) }, "output matching "+re.String())
	return re.FindStringSubmatch(out)
}

// output returns everything received so far.
func (cl *client) output() string {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.out.String()
}

// end is the offset one past the last output byte received (v2).
func (cl *client) end() int64 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.endLocked()
}

// endLocked is end with cl.mu held.
func (cl *client) endLocked() int64 {
	if cl.discard && cl.lastEnd > 0 {
		return cl.lastEnd
	}
	if len(cl.frames) == 0 {
		if len(cl.ready) == 22 {
			return int64(binary.BigEndian.Uint64(cl.ready[6:]))
		}
		return 0
	}
	if cl.discard {
		return cl.lastEnd
	}
	f := cl.frames[len(cl.frames)-1]
	return f.offset + int64(len(f.data))
}

func (cl *client) send(p string) {
	cl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	if cl.v2 {
		err = cl.c.Write(ctx, websocket.MessageBinary, AppendInput(nil, uint64(cl.end()), []byte(p)))
	} else {
		err = cl.c.Write(ctx, websocket.MessageText, []byte(p))
	}
	if err != nil {
		cl.t.Fatalf("send %q: %v", p, err)
	}
}

func sendBinary(t testing.TB, c *websocket.Conn, p []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageBinary, p); err != nil {
		t.Fatalf("write frame: %v", err)
	}
}

// attachV2 dials, sends init and starts a client.
func attachV2(t testing.TB, url string, in Init) *client {
	t.Helper()
	return attachV2Opt(t, url, in, false)
}

func attachV2Discard(t testing.TB, url string, in Init) *client {
	t.Helper()
	return attachV2Opt(t, url, in, true)
}

func attachV2Opt(t testing.TB, url string, in Init, discard bool) *client {
	t.Helper()
	c := dial(t, url, true)
	if c.Subprotocol() != SubprotocolV2 {
		t.Fatalf("subprotocol = %q, want %q", c.Subprotocol(), SubprotocolV2)
	}
	sendBinary(t, c, AppendInit(nil, in))
	cl := startClientDiscard(t, c, true, discard)
	cl.wait(func() bool { return cl.ready != nil }, "ready frame")
	// Like a real client, take in the replay before typing: input stamped
	// below ready.live is dropped as an answer to replayed queries.
	live := int64(binary.BigEndian.Uint64(cl.ready[14:22]))
	cl.wait(func() bool { return cl.endLocked() >= live }, "the replay up to ready.live")
	return cl
}

// gone reports whether pid no longer runs (absent or a zombie).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	st, err := procfs.ParseStat(b)
	return err == nil && (st.State == 'Z' || st.State == 'X')
}

func waitGone(t testing.TB, pids ...int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range pids {
		for !gone(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still runs", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func asCloseError(err error, ce *websocket.CloseError) bool { return errors.As(err, ce) }
