package sandboxmcp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
)

// Issue 28: HEAD /api/events with a body and Connection: close left a stream
// open for good (a HEAD response writes nothing, so a gone peer was never
// seen, and an unread body stops the server's background read). 140 of them
// filled the connection cap and locked out every new connection, health
// included. 200 of them must now leave the descriptors at their baseline,
// and health must answer all along.
func TestHeadStreamFloodLeavesNothing(t *testing.T) {
	if _, err := exec.LookPath("prlimit"); err != nil {
		t.Skip("prlimit (util-linux) not installed")
	}
	s := sidecartest.Start(t, sidecartest.Build(t), "HOME="+t.TempDir())
	// 256 descriptors: a connection cap of 128, below the flood's 200.
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(s.PID()), "--nofile=256:256").CombinedOutput(); err != nil {
		t.Skipf("prlimit --pid: %v %s", err, out)
	}
	healthLatencies(t, s.URL, 3)
	base := settledStats(t, s)
	addr := strings.TrimPrefix(s.URL, "http://")

	// Health probes on new connections for as long as the flood lasts.
	stop := make(chan struct{})
	var probes sync.WaitGroup
	var lat []time.Duration
	var answered, failures atomic.Int64
	var firstFailure atomic.Value
	probes.Go(func() {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			start := time.Now()
			resp, err := client.Get(s.URL + "/api/health")
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			if err != nil {
				failures.Add(1)
				firstFailure.CompareAndSwap(nil, err.Error())
				continue
			}
			lat = append(lat, time.Since(start))
			answered.Add(1)
		}
	})

	// Four waves of 50; every connection stays open until the whole flood
	// has been answered, as an attacker's would.
	statuses := make(chan int, 200)
	var flood sync.WaitGroup
	var held sync.WaitGroup
	held.Add(1)
	for i := range 200 {
		if i%50 == 0 && i > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		flood.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				statuses <- -1
				return
			}
			defer func() {
				held.Wait()
				c.Close()
			}()
			_, _ = io.WriteString(c, "HEAD /api/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+sidecartest.Token+
				"\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello")
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "HEAD"})
			if err != nil {
				statuses <- 0
				return
			}
			statuses <- resp.StatusCode
		})
	}
	for len(statuses) < cap(statuses) {
		time.Sleep(10 * time.Millisecond)
	}
	held.Done()
	flood.Wait()
	close(statuses)
	got := map[int]int{}
	for code := range statuses {
		got[code]++
	}

	// The stats are asked on a new connection, which a full cap refuses.
	var final apitype.DebugStats
	var statsErr error
	deadline := time.Now().Add(20 * time.Second)
	for {
		http.DefaultClient.CloseIdleConnections()
		final, statsErr = apitype.DebugStats{}, nil
		code, err := s.Do("GET", "/api/debug/stats", nil, &final)
		if err == nil && code != 200 {
			err = fmt.Errorf("status %d", code)
		}
		statsErr = err
		settled := err == nil && final.OpenFDs <= base.OpenFDs && final.Streams == 0
		if (settled && answered.Load() >= 100) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	probes.Wait()
	slices.Sort(lat)
	t.Logf("answers to the flood (status: count): %v", got)
	if len(lat) > 0 {
		t.Logf("health during the flood: %d answered, %d failed; p50 %v p99 %v max %v", len(lat), failures.Load(), pct(lat, 50), pct(lat, 99), lat[len(lat)-1])
	}
	if statsErr != nil {
		t.Fatalf("GET /api/debug/stats after the flood: %v (health: %d failed, first %v)", statsErr, failures.Load(), firstFailure.Load())
	}
	t.Logf("fds: baseline %d, after %d; streams after %d; connections %d (limit %d)", base.OpenFDs, final.OpenFDs, final.Streams, final.Connections, final.ConnectionLimit)
	if final.OpenFDs > base.OpenFDs || final.Streams != 0 {
		t.Errorf("after 200 HEAD /api/events with bodies: %d fds (baseline %d), %d streams open; want the baseline and none", final.OpenFDs, base.OpenFDs, final.Streams)
	}
	if n := failures.Load(); n > 0 || len(lat) < 100 {
		t.Errorf("health failed %d times during the flood (first: %v), answered %d", n, firstFailure.Load(), len(lat))
	}
	if got[http.StatusOK] > 0 {
		t.Errorf("%d HEAD /api/events with a body were answered 200 (a stream), want refused", got[http.StatusOK])
	}
}
