package sandboxmcp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/internal/terminal"
)

// debugStats reads GET /api/debug/stats on a fresh connection, so the
// counts hold exactly one connection of the test: the asking one.
func debugStats(t testing.TB, s *sidecartest.Sidecar) apitype.DebugStats {
	t.Helper()
	http.DefaultClient.CloseIdleConnections()
	var st apitype.DebugStats
	code, err := s.Do("GET", "/api/debug/stats", nil, &st)
	if err != nil || code != 200 {
		t.Fatalf("GET /api/debug/stats = %d, %v", code, err)
	}
	return st
}

// healthLatencies times n health checks, each on a new connection (as a
// load balancer's probe would), and returns them sorted.
func healthLatencies(t testing.TB, url string, n int) []time.Duration {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	lat := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		resp, err := client.Get(url + "/api/health")
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("health = %d", resp.StatusCode)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	return lat
}

func pct(lat []time.Duration, p int) time.Duration { return lat[(len(lat)-1)*p/100] }

// Finding 12.1 end to end: a sidecar limited to 256 descriptors keeps
// answering health and authenticated requests while 300 connections without
// a token are held against it, and every request that announced a body it
// never sent is answered 401 at once.
func TestHeldConnectionsUnderFDLimit(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) not installed")
	}
	s := sidecartest.Start(t, sidecartest.Build(t))
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(s.PID()), "--nofile=256:256").CombinedOutput(); err != nil {
		t.Skipf("prlimit --pid: %v %s", err, out)
	}
	if st := debugStats(t, s); st.FDLimit != 256 || st.ConnectionLimit != 128 {
		t.Fatalf("after prlimit: fdLimit %d, connection limit %d; want 256, 128", st.FDLimit, st.ConnectionLimit)
	}
	addr := strings.TrimPrefix(s.URL, "http://")
	base := healthLatencies(t, s.URL, 100)

	// 150 announce a body they never send: each must get its 401 now. At most
	// 64 at once, below the connection limit of 128: past it the limiter may
	// rightly shed a stranger's connection before its 401 is written.
	var wg sync.WaitGroup
	answered := make(chan error, 150)
	sem := make(chan struct{}, 64)
	for range 150 {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				answered <- err
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, "POST /api/services HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err == nil && resp.StatusCode != 401 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
			answered <- err
		})
	}
	wg.Wait()
	close(answered)
	for err := range answered {
		if err != nil {
			t.Fatalf("request with an unsent body and no token: %v, want an immediate 401", err)
		}
	}

	// 300 hold connections with half-sent headers (slowloris).
	held := make([]net.Conn, 0, 300)
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		_, _ = io.WriteString(c, "POST /api/services HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n")
		held = append(held, c)
	}
	lat := healthLatencies(t, s.URL, 100)
	if code, err := s.Do("GET", "/api/services", nil, nil); err != nil || code != 200 {
		t.Fatalf("authenticated list with 300 held connections = %d, %v", code, err)
	}
	var info apitype.ServiceInfo
	if code, err := s.Do("POST", "/api/services", map[string]string{"name": "held", "command": "sleep 60"}, &info); err != nil || code != 200 {
		t.Fatalf("authenticated start with 300 held connections = %d, %v", code, err)
	}
	st := debugStats(t, s)
	if st.Connections > st.ConnectionLimit || st.ShedConnections < 100 {
		t.Errorf("stats %+v: want at most the limit open and the extra connections shed", st)
	}
	t.Logf("health (100 new connections): idle p50 %v p99 %v; with 300 held connections p50 %v p99 %v; open fds %d of 256, connections %d (limit %d), shed %d",
		pct(base, 50), pct(base, 99), pct(lat, 50), pct(lat, 99), st.OpenFDs, st.Connections, st.ConnectionLimit, st.ShedConnections)
}

// Acceptance 12.2: 64 terminals and 200 stalled SSE clients, then everything
// closed: goroutines and descriptors of the sidecar return to their baseline.
func TestLoadLeavesNothingBehind(t *testing.T) {
	// An empty HOME: the machine's ~/.bashrc (pyenv, conda…) must not make
	// 64 shells slow to start or to exit.
	s := sidecartest.Start(t, sidecartest.Build(t), "HOME="+t.TempDir())
	// Warm up the paths the load takes, so lazily started goroutines
	// (the transport's, the terminal's) count in the baseline.
	healthLatencies(t, s.URL, 3)
	base := settledStats(t, s)
	ws := "ws" + strings.TrimPrefix(s.URL, "http") + "/api/terminal"
	hdr := http.Header{"Authorization": {"Bearer " + sidecartest.Token}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	type term struct {
		c    *websocket.Conn
		v2   bool
		done chan struct{} // closed when the connection has ended
	}
	terms := make([]term, 0, 64)
	defer func() {
		for _, tc := range terms {
			tc.c.CloseNow()
		}
	}()
	for i := range 64 {
		v2 := i%2 == 1
		var opts websocket.DialOptions
		opts.HTTPHeader = hdr
		if v2 {
			opts.Subprotocols = []string{terminal.SubprotocolV2}
		}
		c, _, err := websocket.Dial(ctx, ws, &opts)
		if err != nil {
			t.Fatalf("terminal %d: %v", i, err)
		}
		c.SetReadLimit(terminal.MaxMessage)
		if v2 {
			if err := c.Write(ctx, websocket.MessageBinary, terminal.AppendInit(nil, terminal.Init{Session: "load" + strconv.Itoa(i), Cols: 80, Rows: 24})); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		terms = append(terms, term{c, v2, done})
		// Read in the background so output never stalls a shell.
		go func() {
			defer close(done)
			for {
				if _, _, err := c.Read(ctx); err != nil {
					return
				}
			}
		}()
	}
	// The 65th is refused before the upgrade.
	if _, resp, err := websocket.Dial(ctx, ws, &websocket.DialOptions{HTTPHeader: hdr}); err == nil || resp == nil || resp.StatusCode != 503 {
		t.Fatalf("65th terminal: %v %v, want 503", resp, err)
	}

	// 200 SSE clients that never read.
	addr := strings.TrimPrefix(s.URL, "http://")
	sse := make([]net.Conn, 0, 200)
	defer func() {
		for _, c := range sse {
			c.Close()
		}
	}()
	for range 200 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+sidecartest.Token+"\r\n\r\n")
		sse = append(sse, c)
	}
	waitStats(t, s, func(st apitype.DebugStats) bool {
		return st.TerminalSessions == 64 && st.Streams == 264
	}, "64 terminal sessions and 264 streams")
	peak := debugStats(t, s)

	// Everything goes away: v2 shells exit (a dropped v2 connection would
	// keep its shell for the grace period, by design), v1 shells die with
	// their connection, SSE clients hang up.
	var exits sync.WaitGroup
	for _, tc := range terms {
		if !tc.v2 {
			tc.c.CloseNow()
			continue
		}
		// Typed ahead of a shell still starting, the line may be lost:
		// repeat it until the shell has exited and the connection closed.
		exits.Go(func() {
			for {
				_ = tc.c.Write(ctx, websocket.MessageBinary, terminal.AppendInput(nil, 1<<62, []byte("exit\r")))
				select {
				case <-tc.done:
					return
				case <-time.After(time.Second):
				case <-ctx.Done():
					return
				}
			}
		})
	}
	exits.Wait()
	for _, c := range sse {
		c.Close()
	}
	var final apitype.DebugStats
	waitStats(t, s, func(st apitype.DebugStats) bool {
		final = st
		return st.TerminalSessions == 0 && st.Streams == 0 && st.OpenFDs <= base.OpenFDs && st.Goroutines <= base.Goroutines
	}, fmt.Sprintf("the baseline (%d fds, %d goroutines)", base.OpenFDs, base.Goroutines))
	t.Logf("baseline: %d fds, %d goroutines, RSS %d KiB; peak (64 terminals, 200 SSE): %d fds, %d goroutines, RSS %d KiB; after: %d fds, %d goroutines, RSS %d KiB",
		base.OpenFDs, base.Goroutines, base.RSSBytes>>10, peak.OpenFDs, peak.Goroutines, peak.RSSBytes>>10, final.OpenFDs, final.Goroutines, final.RSSBytes>>10)
}

// settledStats waits until descriptors and goroutines stop changing (start-up
// work such as the first port scan ends) and returns the stats then.
func settledStats(t *testing.T, s *sidecartest.Sidecar) apitype.DebugStats {
	t.Helper()
	prev := debugStats(t, s)
	same := 0
	for deadline := time.Now().Add(15 * time.Second); same < 5 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		st := debugStats(t, s)
		if st.OpenFDs == prev.OpenFDs && st.Goroutines == prev.Goroutines {
			same++
		} else {
			same = 0
		}
		prev = st
	}
	return prev
}

func waitStats(t *testing.T, s *sidecartest.Sidecar, cond func(apitype.DebugStats) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var st apitype.DebugStats
	for {
		st = debugStats(t, s)
		if cond(st) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: stats %+v; open files:\n%s", what, st, openFiles(s.PID()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openFiles lists what the descriptors of pid point at.
func openFiles(pid int) string {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range ents {
		target, _ := os.Readlink(dir + "/" + e.Name())
		fmt.Fprintf(&b, "%s -> %s\n", e.Name(), target)
	}
	return b.String()
}
