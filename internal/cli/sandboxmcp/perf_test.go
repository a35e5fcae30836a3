package sandboxmcp

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// startWithServices starts a real sidecar with n services running `sleep 600`;
// sidecartest stops them when b ends.
func startWithServices(b *testing.B, n int) *sidecartest.Sidecar {
	b.Helper()
	return startBinWithServices(b, sidecartest.Build(b), n)
}

func startBinWithServices(b *testing.B, bin string, n int) *sidecartest.Sidecar {
	b.Helper()
	s := sidecartest.Start(b, bin)
	for i := range n {
		req := apitype.StartServiceRequest{Name: fmt.Sprintf("svc%d", i), Command: "sleep 600"}
		if code, err := s.Do("POST", "/api/services", req, nil); err != nil || code != 200 {
			b.Fatalf("start svc%d = %d, %v; stderr:\n%s", i, code, err, s.Stderr())
		}
	}
	return s
}

// BenchmarkListServicesWrk is the out-of-process loopback load test: wrk, a
// separate process, sends keep-alive GET /api/services with 10 services to the
// real binary for 5 s per iteration. Run it with -benchtime 1x; it is skipped
// when wrk is not installed (apt-get install wrk).
func BenchmarkListServicesWrk(b *testing.B) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		b.Skip("wrk not installed (apt-get install wrk); skipping the out-of-process loopback load test")
	}
	s := startWithServices(b, 10)
	var res wrkResult
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, wrk, "-t1", "-c4", "-d5s", "--latency",
			"-H", "Authorization: Bearer "+sidecartest.Token, s.URL+"/api/services").CombinedOutput()
		cancel()
		if err != nil {
			b.Fatalf("wrk: %v\n%s", err, out)
		}
		if res, err = parseWrk(string(out)); err != nil {
			b.Fatalf("parse wrk output: %v\n%s", err, out)
		}
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(res.rps, "req/s")
	b.ReportMetric(float64(res.p50)/1e3, "p50-µs")
	b.ReportMetric(float64(res.p99)/1e3, "p99-µs")
}

// wrkResult is what BenchmarkListServicesWrk reads from wrk's report.
type wrkResult struct {
	rps      float64
	p50, p99 time.Duration
}

var wrkPercentile = regexp.MustCompile(`(?m)^\s+(50|99)%\s+(\S+)$`)

// parseWrk reads requests/s and the 50th and 99th latency percentiles from
// `wrk --latency` output; any non-2xx answer is an error.
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	if strings.Contains(out, "Non-2xx") {
		return r, fmt.Errorf("sidecar answered non-2xx")
	}
	_, after, ok := strings.Cut(out, "Requests/sec:")
	if !ok {
		return r, fmt.Errorf("no Requests/sec line")
	}
	rps, err := strconv.ParseFloat(strings.Fields(after)[0], 64)
	if err != nil {
		return r, err
	}
	r.rps = rps
	for _, m := range wrkPercentile.FindAllStringSubmatch(out, -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil {
			return r, err
		}
		if m[1] == "50" {
			r.p50 = d
		} else {
			r.p99 = d
		}
	}
	if r.p50 == 0 || r.p99 == 0 {
		return r, fmt.Errorf("no latency distribution")
	}
	return r, nil
}

func TestParseWrk(t *testing.T) {
	out := `Running 5s test @ http://127.0.0.1:4000/api/services
  1 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   150.00us   50.00us   2.00ms   90.00%
    Req/Sec    25.00k     1.00k   27.00k    70.00%
  Latency Distribution
     50%  140.00us
     75%  160.00us
     90%  200.00us
     99%    1.20ms
  125000 requests in 5.00s, 300.00MB read
Requests/sec:  24999.50
Transfer/sec:     60.00MB
`
	got, err := parseWrk(out)
	want := wrkResult{rps: 24999.5, p50: 140 * time.Microsecond, p99: 1200 * time.Microsecond}
	if err != nil || got != want {
		t.Errorf("parseWrk(...) = %+v, %v, want %+v", got, err, want)
	}
	if _, err := parseWrk(strings.Replace(out, "Requests/sec", "  Non-2xx or 3xx responses: 3\nRequests/sec", 1)); err == nil {
		t.Errorf("parseWrk(output with non-2xx answers) = nil error, want an error")
	}
}

// BenchmarkIdleRSSWithServices reports the idle memory of the sidecar running
// 10 services and the mean of their monitor processes (the binary re-executed
// with SANDBOX_MCP_INTERNAL=monitor, named mcp-svc-monitor): RSS, and the private part (RSS less
// the pages of the binary shared with every other sidecar process), which is
// what each process really adds. Run it with -benchtime 1x.
func BenchmarkIdleRSSWithServices(b *testing.B) {
	s := startWithServices(b, 10)
	b.ResetTimer()
	var sidecar, monitor memUse
	for range b.N {
		// Let start-up work settle so this is the idle figure.
		time.Sleep(200 * time.Millisecond)
		sidecar = readMemUse(b, s.PID())
		data, err := os.ReadFile(filepath.Join(s.StateDir, "state.json"))
		if err != nil {
			b.Fatal(err)
		}
		var st struct {
			Services map[string]struct {
				MonitorPID int `json:"monitorPid"`
			} `json:"services"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			b.Fatal(err)
		}
		if len(st.Services) == 0 {
			b.Fatal("no services in state.json")
		}
		monitor = memUse{}
		for _, r := range st.Services {
			u := readMemUse(b, r.MonitorPID)
			monitor.rssKB += u.rssKB
			monitor.privateKB += u.privateKB
		}
		monitor.rssKB /= len(st.Services)
		monitor.privateKB /= len(st.Services)
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(sidecar.rssKB)/1024, "sidecar-RSS-MiB")
	b.ReportMetric(float64(sidecar.privateKB)/1024, "sidecar-private-MiB")
	b.ReportMetric(float64(monitor.rssKB)/1024, "monitor-RSS-MiB")
	b.ReportMetric(float64(monitor.privateKB)/1024, "monitor-private-MiB")
}

// memUse is a process's resident memory in KiB.
type memUse struct{ rssKB, privateKB int }

// readMemUse reads Rss and Private_Clean+Private_Dirty from /proc/<pid>/smaps_rollup.
func readMemUse(b *testing.B, pid int) memUse {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		b.Fatalf("read memory of pid %d: %v", pid, err)
	}
	var u memUse
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "Rss:":
			u.rssKB = n
		case "Private_Clean:", "Private_Dirty:":
			u.privateKB += n
		}
	}
	return u
}

// BenchmarkServiceLogAppendLatency measures the whole log path of a real
// service: a line written to the service's stdin-side FIFO is printed by the
// service (`cat`), copied by its monitor into the log file, read by the
// sidecar and sent as an "append" frame of GET /api/logs/{name}; the clock
// stops when the SSE client has parsed that frame.
func BenchmarkServiceLogAppendLatency(b *testing.B) {
	fifo := filepath.Join(b.TempDir(), "in")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		b.Fatal(err)
	}
	s := sidecartest.Start(b, sidecartest.Build(b))
	req := apitype.StartServiceRequest{Name: "echo", Command: "exec cat " + fifo}
	if code, err := s.Do("POST", "/api/services", req, nil); err != nil || code != 200 {
		b.Fatalf("start echo = %d, %v; stderr:\n%s", code, err, s.Stderr())
	}
	// O_RDWR opens a FIFO without waiting for its reader.
	in, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer in.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hreq, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/api/logs/echo", nil)
	hreq.Header.Set("Authorization", "Bearer "+sidecartest.Token)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b.Fatalf("GET /api/logs/echo = %d", resp.StatusCode)
	}
	frames := bufio.NewReader(resp.Body)
	// waitFor reads append frames until their content holds want.
	waitFor := func(want string) {
		var got strings.Builder
		for !strings.Contains(got.String(), want) {
			line, err := frames.ReadString('\n')
			if err != nil {
				b.Fatalf("read log stream: %v (content so far %q)", err, got.String())
			}
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok {
				continue
			}
			var f struct{ Type, Content string }
			if err := json.Unmarshal([]byte(data), &f); err != nil {
				b.Fatalf("frame %q: %v", line, err)
			}
			if f.Type == "append" {
				got.WriteString(f.Content)
			}
		}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		line := fmt.Sprintf("line %d\n", i)
		start := time.Now()
		if _, err := in.WriteString(line); err != nil {
			b.Fatal(err)
		}
		waitFor(line)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkColdStartReadopt10 measures a restart: exec → first 200 from
// /api/health of a sidecar whose state dir holds 10 running services started
// by a previous sidecar that was killed, which it must re-adopt first.
func BenchmarkColdStartReadopt10(b *testing.B) {
	bin := sidecartest.Build(b)
	first := startBinWithServices(b, bin, 10)
	leftovers := runProcesses(b, first.StateDir)
	// Runs last: whatever the sidecar below could not stop is killed.
	b.Cleanup(func() {
		for _, p := range leftovers {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.monitor)); exe == bin {
				_ = syscall.Kill(p.monitor, syscall.SIGKILL)
			}
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pgid)); strings.HasPrefix(string(cmdline), "sleep\x00") {
				_ = syscall.Kill(-p.pgid, syscall.SIGKILL)
			}
		}
	})
	if err := syscall.Kill(first.PID(), syscall.SIGKILL); err != nil {
		b.Fatal(err)
	}
	// Runs first: a sidecar on the same state dir stops the services the
	// killed one left running.
	b.Cleanup(func() {
		s := sidecartest.Start(b, bin, "SANDBOX_MCP_STATE_DIR="+first.StateDir, "WORKSPACE_DIR="+first.Workspace)
		var list apitype.ServicesResponse
		if _, err := s.Do("GET", "/api/services", nil, &list); err != nil {
			b.Errorf("list services: %v", err)
		}
		if len(list.Services) != 10 {
			b.Errorf("after the restarts %d services are listed, want 10", len(list.Services))
		}
		for _, svc := range list.Services {
			if svc.Status != apitype.StatusRunning {
				b.Errorf("after the restarts %s is %s, want running", svc.Name, svc.Status)
			}
		}
	})
	// Wait until the killed sidecar's port is free again.
	for deadline := time.Now().Add(10 * time.Second); ; {
		resp, err := http.Get(first.URL + "/api/health")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			b.Fatal("the killed sidecar still answers")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.ResetTimer()
	for range b.N {
		cmd := exec.Command(bin, "api")
		cmd.Env = append(os.Environ(), first.Env...)
		if err := testutil.StartGroup(b, cmd); err != nil {
			b.Fatal(err)
		}
		waitHealthy(b, first.URL, 10*time.Second)
		b.StopTimer()
		// The services live in their own sessions and survive this.
		testutil.KillGroup(cmd)
		b.StartTimer()
	}
}

// runProcess is one service run as state.json records it.
type runProcess struct{ pgid, monitor int }

// runProcesses reads the runs recorded in <stateDir>/state.json.
func runProcesses(b *testing.B, stateDir string) []runProcess {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		b.Fatal(err)
	}
	var st struct {
		Services map[string]struct {
			PGID       int `json:"pgid"`
			MonitorPID int `json:"monitorPid"`
		} `json:"services"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		b.Fatal(err)
	}
	var out []runProcess
	for _, r := range st.Services {
		out = append(out, runProcess{pgid: r.PGID, monitor: r.MonitorPID})
	}
	return out
}

// waitHealthy polls /api/health every millisecond until it answers 200.
func waitHealthy(t testing.TB, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	c := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		resp, err := c.Get(url + "/api/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("%s/api/health did not answer 200 within %s", url, timeout)
}
