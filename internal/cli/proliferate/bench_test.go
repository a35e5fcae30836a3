package proliferate

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// BenchmarkServicesListExec measures the wall time of running the built
// `proliferate services list` binary against a loopback sidecar with five
// services: process start, config, one HTTP request, JSON output.
func BenchmarkServicesListExec(b *testing.B) {
	bin := filepath.Join(testutil.Commands(b, "proliferate"), "proliferate")
	s := newStandIn(b, "bench-token")
	for i := range 5 {
		s.start(apitype.StartServiceRequest{Name: "svc" + string(rune('a'+i)), Command: "npm run dev"})
	}
	url := s.serve()
	env := []string{"PROLIFERATE_SANDBOX_MCP_URL=" + url, "SANDBOX_MCP_AUTH_TOKEN=bench-token", "PATH=" + os.Getenv("PATH")}
	var times []time.Duration
	for b.Loop() {
		start := time.Now()
		cmd := exec.Command(bin, "services", "list")
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil || !strings.HasPrefix(string(out), `{"services":[`) {
			b.Fatalf("services list = %q, %v", out, err)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "median-ms")
}
