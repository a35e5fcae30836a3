package terminal

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
)

const floodCommand = "head -c 50000000 /dev/zero | base64"

// BenchmarkThroughput streams `head -c 50000000 /dev/zero | base64` (about
// 68 MB with the PTY's CRLF) through the PTY and a loopback WebSocket.
// pty-only reads the same output straight from a PTY: the ceiling.
func BenchmarkThroughput(b *testing.B) {
	b.Run("pty-only", func(b *testing.B) {
		var total int64
		var elapsed time.Duration
		buf := make([]byte, 64<<10)
		cpu0 := cpuTime()
		for b.Loop() {
			start := time.Now()
			cmd := exec.Command("bash", "-c", floodCommand)
			f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
			if err != nil {
				b.Fatal(err)
			}
			for {
				n, err := f.Read(buf)
				total += int64(n)
				if err != nil {
					break
				}
			}
			_ = cmd.Wait()
			f.Close()
			elapsed += time.Since(start)
		}
		b.ReportMetric(float64(total)/1e6/elapsed.Seconds(), "MB/s")
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/(float64(total)/1e6), "cpu-µs/MB")
	})
	for _, v2 := range []bool{false, true} {
		name := "v1"
		if v2 {
			name = "v2"
		}
		b.Run(name, func(b *testing.B) {
			opts := testOptions(b)
			opts.Command = []string{"bash", "-c", floodCommand}
			_, url := newTestServer(b, opts)
			var total int64
			var elapsed time.Duration
			cpu0 := cpuTime()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				c := dial(b, url, v2)
				if v2 {
					sendBinary(b, c, AppendInit(nil, Init{Session: "bench" + strings.Repeat("x", i%3), Cols: 80, Rows: 24}))
				}
				n := drain(b, c, v2)
				elapsed += time.Since(start)
				total += n
				c.CloseNow()
			}
			b.ReportMetric(float64(total)/1e6/elapsed.Seconds(), "MB/s")
			b.ReportMetric(float64(total)/float64(b.N)/1e6, "MB/op")
			// CPU of this process (server and client) per MB: steadier than
			// MB/s on a busy machine.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/(float64(total)/1e6), "cpu-µs/MB")
		})
	}
}

// BenchmarkThroughputRatio measures the raw PTY and both protocols in the
// same iterations, interleaved, so a busy machine slows all three alike; the
// ratios are the figures to compare (issue 13.6 asks for at least 0.8).
func BenchmarkThroughputRatio(b *testing.B) {
	const cmdline = "head -c 20000000 /dev/zero | base64"
	opts := testOptions(b)
	opts.Command = []string{"bash", "-c", cmdline}
	_, url := newTestServer(b, opts)
	buf := make([]byte, 64<<10)
	var bytes [3]int64
	var elapsed, cpu [3]time.Duration
	for i := 0; b.Loop(); i++ {
		// Rotate the order so none always runs first (cold caches, a
		// neighbour's burst).
		for k := range 3 {
			which := (i + k) % 3
			start, cpu0 := time.Now(), cpuTime()
			switch which {
			case 0:
				cmd := exec.Command("bash", "-c", cmdline)
				f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 80, Rows: 24})
				if err != nil {
					b.Fatal(err)
				}
				for {
					n, err := f.Read(buf)
					bytes[0] += int64(n)
					if err != nil {
						break
					}
				}
				_ = cmd.Wait()
				f.Close()
			default:
				v2 := which == 2
				c := dial(b, url, v2)
				if v2 {
					sendBinary(b, c, AppendInit(nil, Init{Session: "ratio" + strconv.Itoa(i), Cols: 80, Rows: 24}))
				}
				bytes[which] += drain(b, c, v2)
				c.CloseNow()
			}
			elapsed[which] += time.Since(start)
			cpu[which] += cpuTime() - cpu0
		}
	}
	rate := func(k int) float64 { return float64(bytes[k]) / 1e6 / elapsed[k].Seconds() }
	b.ReportMetric(rate(0), "pty-MB/s")
	b.ReportMetric(rate(1), "v1-MB/s")
	b.ReportMetric(rate(2), "v2-MB/s")
	b.ReportMetric(rate(1)/rate(0), "v1/pty")
	b.ReportMetric(rate(2)/rate(0), "v2/pty")
	// CPU of this process per MB (the reader alone for the raw PTY; server
	// and client for the protocols): steadier than rates on a busy machine.
	for k, name := range []string{"pty", "v1", "v2"} {
		b.ReportMetric(float64(cpu[k].Microseconds())/(float64(bytes[k])/1e6), name+"-cpu-µs/MB")
	}
}

// drain reads output until the connection closes and returns its size.
func drain(b *testing.B, c *websocket.Conn, v2 bool) int64 {
	var n int64
	for {
		typ, p, err := c.Read(context.Background())
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				b.Fatalf("read: %v", err)
			}
			return n
		}
		switch {
		case !v2 && typ == websocket.MessageText:
			n += int64(len(p))
		case v2 && len(p) > 0 && p[0] == FrameOutput:
			n += int64(len(p) - outputHeader)
		}
	}
}

// BenchmarkEcho measures keystroke to echo latency: one byte typed into a
// PTY in non-canonical mode with echo on, until its echo frame arrives.
func BenchmarkEcho(b *testing.B) {
	for _, v2 := range []bool{false, true} {
		name := "v1"
		if v2 {
			name = "v2"
		}
		b.Run(name, func(b *testing.B) {
			_, url := newTestServer(b, testOptions(b))
			c := dial(b, url, v2)
			ctx := context.Background()
			typ := websocket.MessageText
			key := func(s string) []byte { return []byte(s) }
			if v2 {
				typ = websocket.MessageBinary
				sendBinary(b, c, AppendInit(nil, Init{Session: "echo", Cols: 80, Rows: 24}))
				// Offsets are irrelevant here: nothing is replayed.
				key = func(s string) []byte { return AppendInput(nil, 1<<62, []byte(s)) }
			}
			if err := c.Write(ctx, typ, key("stty -icanon; echo __R$((1))__; cat >/dev/null\r")); err != nil {
				b.Fatal(err)
			}
			var out strings.Builder
			for !strings.Contains(out.String(), "__R1__") {
				_, p, err := c.Read(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if v2 && len(p) > 0 && p[0] == FrameOutput {
					p = p[outputHeader:]
				}
				out.Write(p)
			}
			// Let the prompt line settle.
			time.Sleep(50 * time.Millisecond)
			var lat []time.Duration
			for b.Loop() {
				start := time.Now()
				if err := c.Write(ctx, typ, key("a")); err != nil {
					b.Fatal(err)
				}
				for {
					_, p, err := c.Read(ctx)
					if err != nil {
						b.Fatal(err)
					}
					if !v2 || (len(p) > 0 && p[0] == FrameOutput) {
						break
					}
				}
				lat = append(lat, time.Since(start))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// cpuTime is the user and system CPU time of this process.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
