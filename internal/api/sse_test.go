package api

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// floodLogs is a LogStreamer whose log grows without end; it counts the
// followers still open.
type floodLogs struct{ open atomic.Int32 }

func (f *floodLogs) Follow(name string) (string, func(context.Context) (string, error), func(), error) {
	f.open.Add(1)
	chunk := strings.Repeat("x", 64<<10)
	next := func(ctx context.Context) (string, error) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		return chunk, nil
	}
	var once atomic.Bool
	stop := func() {
		if once.CompareAndSwap(false, true) {
			f.open.Add(-1)
		}
	}
	return "", next, stop, nil
}

func (f *floodLogs) Tail(name string, n int) ([]string, error) { return nil, nil }

// TestLogStreamDropsAClientThatStopsReading: a client that keeps its
// connection open but reads nothing must not hold a stream forever.
func TestLogStreamDropsAClientThatStopsReading(t *testing.T) {
	old := sseWriteTimeout
	sseWriteTimeout = 200 * time.Millisecond
	t.Cleanup(func() { sseWriteTimeout = old })
	logs := &floodLogs{}
	ts := newTestServer(t, Options{Token: testToken, Logs: logs})
	c, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET /api/logs/web HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", testToken)
	deadline := time.Now().Add(20 * time.Second)
	for logs.open.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for logs.open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the log stream of a client that reads nothing is still open")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
