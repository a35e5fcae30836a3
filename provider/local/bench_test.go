package local

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local/state"
)

func benchEngine(b *testing.B) *Engine {
	e, err := NewEngine(EngineOptions{DataDir: b.TempDir(), SandboxMCP: sandboxMCP})
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// BenchmarkEngineCreate is a bare sandbox from nothing to serving exec (namespaces,
// root, init), then terminated outside the timer.
func BenchmarkEngineCreate(b *testing.B) {
	e := benchEngine(b)
	var d durations
	var rss, n int
	for b.Loop() {
		start := time.Now()
		info, err := e.Create(b.Context(), engine.Spec{Ports: []int{4000}})
		if err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
		b.StopTimer()
		if bx, err := e.lookup(info.ID); err == nil {
			rss += rssKiB(sandboxPIDs(bx.st))
			n++
		}
		if err := e.Terminate(b.Context(), info.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	if n > 0 {
		b.ReportMetric(float64(rss)/float64(n)/1024, "bare-MiB/sandbox")
	}
	d.report(b)
}

// BenchmarkTerminate is a running bare sandbox (one tunnel) until its processes,
// container, shim, cgroups and directory are gone; the create is outside the timer.
func BenchmarkTerminate(b *testing.B) {
	e := benchEngine(b)
	var d durations
	for b.Loop() {
		b.StopTimer()
		info, err := e.Create(b.Context(), engine.Spec{Ports: []int{4000}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := e.Terminate(b.Context(), info.ID); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	d.report(b)
}

// BenchmarkEngineCreateImage is BenchmarkEngineCreate from a two-layer image (the
// overlay, its id-mapped layers and the sandbox's upper layer).
func BenchmarkEngineCreateImage(b *testing.B) {
	base, top := b.TempDir(), b.TempDir()
	copyWithLibs(b, base, "bash", "true")
	os.MkdirAll(top+"/etc", 0o755)
	os.WriteFile(top+"/etc/marker", []byte("x"), 0o644)
	e, err := NewEngine(EngineOptions{DataDir: b.TempDir(), Images: dirImages{"img": {ID: "img", Layers: []string{base, top}}}})
	if err != nil {
		b.Skip(err)
	}
	defer e.Close()
	var d durations
	for b.Loop() {
		start := time.Now()
		info, err := e.Create(b.Context(), engine.Spec{Image: "img"})
		if err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
		b.StopTimer()
		if err := e.Terminate(b.Context(), info.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	d.report(b)
}

// durations are the samples of a benchmark, reported as their median.
type durations []time.Duration

func (d durations) report(b *testing.B) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkExec is the round trip of `true` in a running sandbox.
func BenchmarkExec(b *testing.B) { benchExec(b, false) }

// BenchmarkExecImage is BenchmarkExec in a sandbox of the boot plan's test image.
func BenchmarkExecImage(b *testing.B) { benchExec(b, true) }

func benchExec(b *testing.B, image bool) {
	var spec engine.Spec
	var e *Engine
	if image {
		s, id := planImage(b)
		var err error
		if e, err = NewEngine(EngineOptions{DataDir: b.TempDir(), SandboxMCP: sandboxMCP, Images: s}); err != nil {
			b.Skip(err)
		}
		b.Cleanup(func() { e.Close() })
		spec.Image = id
	} else {
		e = benchEngine(b)
	}
	info, err := e.Create(b.Context(), spec)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Terminate(context.Background(), info.ID)
	var d durations
	for b.Loop() {
		start := time.Now()
		if code, err := e.Exec(b.Context(), info.ID, engine.ExecRequest{Argv: []string{"/bin/true"}}); err != nil || code != 0 {
			b.Fatal(code, err)
		}
		d = append(d, time.Since(start))
	}
	d.report(b)
}

// BenchmarkTunnelThroughput sends 64 MiB per iteration through the host tunnel into a
// sink inside the sandbox.
func BenchmarkTunnelThroughput(b *testing.B) {
	e := benchEngine(b)
	exe, _ := os.Executable()
	info, err := e.Create(b.Context(), engine.Spec{Ports: []int{7000},
		Mounts: []engine.Mount{{Source: exe, Target: "/opt/enginetest/helper", ReadOnly: true}}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Terminate(context.Background(), info.ID)
	if _, err := e.StartDetached(b.Context(), info.ID, engine.ExecRequest{Argv: []string{"/opt/enginetest/helper", "7000"},
		Env: []string{helperEnv + "=sink"}}); err != nil {
		b.Fatal(err)
	}
	addr := net.JoinHostPort(info.Tunnels[0].Host, strconv.Itoa(info.Tunnels[0].HostPort))
	const size = 64 << 20
	buf := make([]byte, 256<<10)
	b.SetBytes(size)
	send := func() error {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
		c.(*net.TCPConn).CloseWrite()
		line, err := bufio.NewReader(c).ReadString(0x0a)
		if err != nil {
			return err
		}
		if strings.TrimSpace(line) != strconv.Itoa(size) {
			return fmt.Errorf("sink got %s bytes", line)
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for send() != nil { // the helper starts listening
		if time.Now().After(deadline) {
			b.Fatal("the sink never answered")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for b.Loop() {
		if err := send(); err != nil {
			b.Fatal(err)
		}
	}
}

// rssKiB sums VmRSS of the processes in pids.
func rssKiB(pids []int) int {
	total := 0
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				total += n
			}
		}
	}
	return total
}

// sandboxPIDs lists the host pids of every process in the sandbox's pid namespace.
func sandboxPIDs(st state.Record) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink("/proc/" + ent.Name() + "/ns/pid"); err == nil && ns == st.PidNS {
			out = append(out, pid)
		}
	}
	return out
}

// BenchmarkBootHealthy is create → sidecar healthy through its tunnel with the boot
// plan (no repo: clone time excluded), then terminate outside the timer. It reports
// the resident memory of the idle sandbox (init, sandbox-mcp and, when installed,
// Caddy) and of its init alone.
func BenchmarkBootHealthy(b *testing.B) { benchBoot(b, false) }

// BenchmarkBootHealthyImage is BenchmarkBootHealthy from the cached boot plan's test
// image (planImage: Caddy is the image's, sandbox-mcp is bound in).
func BenchmarkBootHealthyImage(b *testing.B) { benchBoot(b, true) }

func benchBoot(b *testing.B, image bool) {
	o := testOptions{Root: b.TempDir(), SandboxMCP: sandboxMCP}
	if image {
		o.Images, o.Image = planImage(b)
	}
	p := mustNew(b, o)
	defer p.Close()
	var rss, initRSS, n int
	var d durations
	for b.Loop() {
		start := time.Now()
		bt, err := p.Boot(b.Context(), provider.CreateOptions{SessionID: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
		b.StopTimer()
		if image {
			if got, err := p.eng.ReadFile(b.Context(), bt.SandboxID, imagetest.PlanMarkerPath); err != nil || string(got) != imagetest.PlanMarker+"\n" {
				b.Fatalf("sandbox %s lacks the image's marker (%q, %v)", bt.SandboxID, got, err)
			}
		}
		time.Sleep(200 * time.Millisecond) // idle
		if bx, err := p.eng.lookup(bt.SandboxID); err == nil {
			rss += rssKiB(sandboxPIDs(bx.st))
			initRSS += rssKiB([]int{bx.st.Pid})
			n++
		}
		p.Terminate(b.Context(), "bench", bt.SandboxID)
		b.StartTimer()
	}
	if n > 0 {
		b.ReportMetric(float64(rss)/float64(n)/1024, "idle-MiB/sandbox")
		b.ReportMetric(float64(initRSS)/float64(n)/1024, "init-MiB")
	}
	d.report(b)
}

var _ = io.Discard
