package sandboxmcp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
)

// leftovers lists the live processes, other than the ones in except, that
// belong to the sandbox of stateDir: their environment names the state dir
// (sidecar, monitors, services) or their command line carries tag (services
// that cleared their environment).
func leftovers(stateDir, tag string, except ...int) []string {
	ents, _ := os.ReadDir("/proc")
	envMark := []byte("SANDBOX_MCP_STATE_DIR=" + stateDir + "\x00")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() || slices.Contains(except, pid) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(stat, ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' {
			continue
		}
		env, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if marked := bytes.Contains(env, envMark); marked || bytes.Contains(cl, []byte(tag)) {
			// What the sweep sees of it: its parent, group, state and marker.
			out = append(out, fmt.Sprintf("%d %q (stat %s; marked %v)", pid, bytes.ReplaceAll(cl, []byte{0}, []byte{' '}),
				bytes.Fields(stat[bytes.LastIndexByte(stat, ')')+2:])[:4], marked))
		}
	}
	sort.Strings(out)
	return out
}

// TestKill9DuringStarts (issue 12.2): 10 concurrent starts of commands that
// escape their process group in every usual way, the sidecar killed with
// SIGKILL 0-150 ms into them, a new sidecar on the same state dir, DELETE of
// every listed name: no process of the sandbox may survive, in any round.
func TestKill9DuringStarts(t *testing.T) {
	rounds := 20
	if testing.Short() {
		rounds = 3
	}
	bin := sidecartest.Build(t)
	// A sleep duration no other process on the machine uses: 7xxxxx seconds.
	tag := strconv.Itoa(700000 + rand.IntN(99999))
	nasty := []string{
		"setsid sleep " + tag + " & sleep " + tag,
		"( ( sleep " + tag + " & ) & ); sleep " + tag,
		"sleep " + tag + " & disown; exec sleep " + tag,
		"nohup sleep " + tag + " >/dev/null 2>&1 & sleep " + tag,
		"setsid bash -c 'sleep " + tag + " & sleep " + tag + "' & wait",
		"trap '' TERM; sleep " + tag,
		"exec sleep " + tag,
		"env -i /bin/sh -c 'sleep " + tag + "' & sleep " + tag,
		"(setsid sleep " + tag + " &); sleep " + tag,
		"sleep " + tag + " & sleep " + tag + " & wait",
	}
	client := &http.Client{Timeout: 30 * time.Second}
	survivedRounds := 0
	for round := range rounds {
		base := t.TempDir()
		stateDir := filepath.Join(base, "state")
		ws := filepath.Join(base, "ws")
		if err := os.MkdirAll(ws, 0o755); err != nil {
			t.Fatal(err)
		}
		env := []string{"SANDBOX_MCP_STATE_DIR=" + stateDir, "WORKSPACE_DIR=" + ws}
		s := sidecartest.Start(t, bin, env...)
		var wg sync.WaitGroup
		for i, cmd := range nasty {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf(`{"name":"n%d","command":%q,"stopTimeoutMs":300}`, i, cmd)
				req, _ := http.NewRequest("POST", s.URL+"/api/services", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+sidecartest.Token)
				req.Header.Set("Content-Type", "application/json")
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		time.Sleep(time.Duration(rand.IntN(151)) * time.Millisecond)
		if err := s.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if exited, _ := s.Exited(10 * time.Second); !exited {
			t.Fatal("sidecar not dead 10 s after SIGKILL")
		}
		wg.Wait()

		s2 := sidecartest.Start(t, bin, env...)
		var list struct {
			Services []struct {
				Name string `json:"name"`
			} `json:"services"`
		}
		if code, err := s2.Do("GET", "/api/services", nil, &list); err != nil || code != 200 {
			t.Fatalf("round %d: list = %d, %v", round, code, err)
		}
		for _, svc := range list.Services {
			if code, err := s2.Do("DELETE", "/api/services/"+svc.Name, nil, nil); err != nil || code != 200 {
				t.Errorf("round %d: DELETE %s = %d, %v", round, svc.Name, code, err)
			}
		}
		// Killed processes vanish at once; give the kernel a moment, bounded.
		var left []string
		for deadline := time.Now().Add(5 * time.Second); ; {
			if left = leftovers(stateDir, tag, s2.PID()); len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(left) > 0 {
			survivedRounds++
			t.Errorf("round %d: %d processes survived (%d services listed):\n%s\nsidecar 2 log:\n%s",
				round, len(left), len(list.Services), strings.Join(left, "\n"), s2.Stderr())
			for _, l := range left {
				if pid, err := strconv.Atoi(strings.Fields(l)[0]); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		s2.Stop(t)
	}
	t.Logf("%d rounds, %d with survivors", rounds, survivedRounds)
}

// BenchmarkHealthUnderServiceLoad (issue 12.9) measures GET /api/health
// while services saturate every core with `yes`: p50, p99 and the maximum of
// the answers' latencies. Sub-benchmark nice10 is how services run (nice +10,
// set by their monitor); nice0 renices each service back to 0 (root only) to
// show what the priority buys. The number of busy services is
// SANDBOX_MCP_BENCH_BUSY (default 16). Run it with -benchtime=200x.
func BenchmarkHealthUnderServiceLoad(b *testing.B) {
	busy := 16
	if n, err := strconv.Atoi(os.Getenv("SANDBOX_MCP_BENCH_BUSY")); err == nil && n > 0 {
		busy = n
	}
	bin := sidecartest.Build(b)
	for _, mode := range []struct{ name, cmd string }{
		{"nice10", "exec yes > /dev/null"},
		{"nice0", "renice -n 0 -p $$ > /dev/null || exit 9; exec yes > /dev/null"},
	} {
		b.Run(mode.name, func(b *testing.B) {
			s := sidecartest.Start(b, bin)
			defer s.Stop(b)
			for i := range busy {
				body := map[string]any{"name": fmt.Sprintf("busy%d", i), "command": mode.cmd}
				if code, err := s.Do("POST", "/api/services", body, nil); err != nil || code != 200 {
					b.Fatalf("start busy%d = %d, %v", i, code, err)
				}
			}
			time.Sleep(300 * time.Millisecond)
			var st struct {
				Service struct {
					Status string `json:"status"`
				} `json:"service"`
			}
			if _, err := s.Do("GET", "/api/services/busy0", nil, &st); err != nil || st.Service.Status != "running" {
				if mode.name == "nice0" && err == nil {
					// Lowering a niceness back to 0 takes root (the command exits 9).
					b.Skipf("services cannot renice themselves to 0 here (busy0 is %s)", st.Service.Status)
				}
				b.Fatalf("busy0 = %q, %v; want running", st.Service.Status, err)
			}
			client := &http.Client{Timeout: 30 * time.Second}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				resp, err := client.Get(s.URL + "/api/health")
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
				lat = append(lat, time.Since(t0))
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			slices.Sort(lat)
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(lat[len(lat)/2]), "p50_ms")
			b.ReportMetric(ms(lat[len(lat)*99/100]), "p99_ms")
			b.ReportMetric(ms(lat[len(lat)-1]), "max_ms")
		})
	}
}
