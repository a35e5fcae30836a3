package bastion_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// BenchmarkCreate: a bastion session until both halves are healthy (the
// agent's sidecar answering through the controller's ingress) against a
// single sandbox's create until its sidecar is healthy.
func BenchmarkCreate(b *testing.B) {
	requireEngine(b)
	p, _ := newProvider(b)
	b.Run("single", func(b *testing.B) {
		for range b.N {
			res, err := p.CreateSandbox(b.Context(), provider.CreateOptions{SessionID: "bench-" + randomHex(b, 4)})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			p.Terminate(context.Background(), "", res.SandboxID)
			b.StartTimer()
		}
	})
	b.Run("bastion", func(b *testing.B) {
		for range b.N {
			session := "bench-" + randomHex(b, 4)
			res, err := p.CreateBastion(b.Context(), provider.CreateOptions{SessionID: session},
				provider.BastionOptions{PlatformToken: "plat-" + randomHex(b, 8)})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			endPair(p.Engine(), p, session, res)
			b.StartTimer()
		}
	})
}

// BenchmarkPreview: one GET of the agent's preview server through the
// controller's ingress and the link, against the same GET through the
// engine's DialPort from the host (what a single sandbox's tunnel does).
func BenchmarkPreview(b *testing.B) {
	requireEngine(b)
	p, eng := newProvider(b)
	session := "bench-" + randomHex(b, 4)
	token := "plat-" + randomHex(b, 8)
	res, err := p.CreateBastion(b.Context(), provider.CreateOptions{SessionID: session},
		provider.BastionOptions{PlatformToken: token, AgentPorts: []int{provider.PortSandboxMCP, previewPort}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { endPair(eng, p, session, res) })
	script := strings.NewReplacer("HOST", `"127.0.0.1"`, "PORT", strconv.Itoa(previewPort)).Replace(previewServer)
	if _, err := eng.StartDetached(b.Context(), res.AgentID, engine.ExecRequest{Argv: []string{"python3", "-c", script}}); err != nil {
		b.Fatal(err)
	}
	direct := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return eng.DialPort(ctx, res.AgentID, previewPort)
	}}}
	paths := map[string]struct {
		c   *http.Client
		url string
	}{
		"direct":  {direct, "http://agent/x"},
		"ingress": {&http.Client{}, res.IngressURL + rules.BastionPortPrefix + strconv.Itoa(previewPort) + "/x"},
	}
	for _, name := range []string{"direct", "ingress"} {
		pc := paths[name]
		do := func() error {
			req, _ := http.NewRequest(http.MethodGet, pc.url, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := pc.c.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("GET %s = %s", pc.url, resp.Status)
			}
			return nil
		}
		for range 100 { // the server starting, the connections warm
			if do() == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		b.Run(name, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			for range b.N {
				t0 := time.Now()
				if err := do(); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}
