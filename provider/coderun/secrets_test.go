package coderun

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// secretValue is the value of the secret TestSecretFetch sends: shaped like an API key,
// so its placeholder keeps the prefix.
const secretValue = "sk-test-F3tchV4lue0123456789abcdef"

// TestSecretFetch is the acceptance of secrets in code execution: Deno.env.get of a
// secret_env is the engine's placeholder, and a fetch to the dependency's host
// carries the value (the engine's egress proxy swaps it), while the response's echo
// of it comes back to the code scrubbed to the placeholder. The upstream listens in a
// network namespace the test makes, at a private address the secret's hosts name.
func TestSecretFetch(t *testing.T) {
	eng := needRuntime(t)
	if !eng.Capabilities().Isolated {
		t.Skip("secrets need the engine's egress proxy, which an unisolated engine has not")
	}
	ln := upstreamNet(t)
	ip, _, _ := net.SplitHostPort(ln.Addr().String())
	got := make(chan string, 4)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Authorization"):
		default:
		}
		fmt.Fprintf(w, "echo %s", r.Header.Get("Authorization"))
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-served })

	r, progress := newRunner(t, secretConfig(t, "", ip, secretValue), Options{})
	s := session(t, r, "secret-fetch")

	res := run(t, s, `Deno.env.get("CODERUN_TEST_TOKEN")`)
	var ph string
	if !res.Success || json.Unmarshal(res.Result, &ph) != nil {
		t.Fatalf("Deno.env.get(CODERUN_TEST_TOKEN) = %+v (result %s), want a string", res, res.Result)
	}
	if ph == secretValue || !strings.HasPrefix(ph, "sk-test-") || len(ph) != len(secretValue) {
		t.Errorf("Deno.env.get(CODERUN_TEST_TOKEN) = %q, want a placeholder shaped like the value", ph)
	}

	res = run(t, s, `const r = await fetch("http://`+ln.Addr().String()+`/", {headers: {Authorization: "Bearer " + Deno.env.get("CODERUN_TEST_TOKEN")}}); `+
		`[r.status, await r.text()]`)
	var answer []any
	if !res.Success || json.Unmarshal(res.Result, &answer) != nil {
		t.Fatalf("fetch to the secret's host = %+v (result %s)", res, res.Result)
	}
	if want := fmt.Sprint([]any{200.0, "echo Bearer " + ph}); fmt.Sprint(answer) != want {
		t.Errorf("fetch to the secret's host = %v, want %v: the echo scrubbed to the placeholder", answer, want)
	}
	select {
	case a := <-got:
		if a != "Bearer "+secretValue {
			t.Errorf("upstream got Authorization %q, want the value", a)
		}
	default:
		t.Error("the upstream got no request")
	}
	if strings.Contains(progress.String(), secretValue) || strings.Contains(string(res.Result)+res.Stdout, secretValue) {
		t.Error("the value shows in the progress output or the code's result")
	}
}

// noGatewayEngine is the real engine refusing Spec.Secrets as Modal's and E2B's
// adapters do without an egress gateway (gateway.Refuse), with the specs it was
// asked to create kept.
type noGatewayEngine struct {
	*local.Engine
	mu    sync.Mutex
	specs []engine.Spec
}

func (e *noGatewayEngine) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	e.mu.Lock()
	e.specs = append(e.specs, spec)
	e.mu.Unlock()
	if err := gateway.Refuse("remote", spec); err != nil {
		return engine.Info{}, err
	}
	return e.Engine.Create(ctx, spec)
}

// TestSecretsRefusedWithoutGateway: on an engine that cannot carry secrets, a session
// fails with an error that says what to do, and no sandbox was asked for with the
// value in its environment (never degraded to an environment variable).
func TestSecretsRefusedWithoutGateway(t *testing.T) {
	eng := &noGatewayEngine{Engine: needRuntime(t)}
	r, _ := newRunner(t, testConfig(t, ""), Options{Engine: eng})
	s := session(t, r, "no-gateway")
	_, err := s.RunCode(t.Context(), "1 + 1", "test")
	if !errors.Is(err, engine.ErrUnsupported) || !strings.Contains(err.Error(), "configure an egress gateway") || !strings.Contains(err.Error(), "secret_env") {
		t.Errorf("RunCode on an engine without a gateway = %v, want ErrUnsupported saying to configure a gateway or remove secret_env", err)
	}
	eng.mu.Lock()
	defer eng.mu.Unlock()
	sessions := 0
	for _, spec := range eng.specs {
		if spec.Labels["coderun-session"] == "" {
			continue
		}
		sessions++
		if len(spec.Secrets) != 1 {
			t.Errorf("session spec secrets = %d, want the secret", len(spec.Secrets))
		}
		for _, kv := range spec.Env {
			if strings.Contains(kv, testSecret) {
				t.Errorf("the secret's value is in a session spec's environment: %q", kv)
			}
		}
	}
	if sessions == 0 {
		t.Error("no session sandbox was asked for")
	}
}

// upstreamNet makes a network namespace joined to the host's by a veth pair, both
// named and addressed (10.x.y.0/30) at random so that concurrent tests do not
// collide, and listens inside it on the peer's address; the engine's egress proxy,
// on the host's side, reaches it through the pair. Everything goes with the test's
// cleanup (deleting the namespace deletes the pair).
func upstreamNet(t *testing.T) net.Listener {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a network namespace for the upstream needs root")
	}
	testutil.NeedCommand(t, "ip", "a network namespace for the upstream")
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ns, vh, vp := "crs-"+id, "crh"+id, "crp"+id
	hostIP, peerIP := fmt.Sprintf("10.%d.%d.1", 100+b[0]%100, b[1]&0xfc), fmt.Sprintf("10.%d.%d.2", 100+b[0]%100, b[1]&0xfc)
	ipc := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := ipc("netns", "add", ns); err != nil {
		t.Skipf("cannot make a network namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := ipc("netns", "del", ns); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
	for _, args := range [][]string{
		{"link", "add", vh, "type", "veth", "peer", "name", vp, "netns", ns},
		{"addr", "add", hostIP + "/30", "dev", vh},
		{"-n", ns, "addr", "add", peerIP + "/30", "dev", vp},
		{"link", "set", vh, "up"},
		{"-n", ns, "link", "set", vp, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if err := ipc(args...); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// The listener is made inside the namespace, on a thread that goes back to
		// the host's namespace after (or dies with the goroutine if it cannot).
		runtime.LockOSThread()
		own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer unix.Close(own)
		nsFd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer unix.Close(nsFd)
		if err := unix.Setns(nsFd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(peerIP, "0"))
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{ln, err}
	}()
	res := <-ch
	if res.err != nil {
		t.Fatalf("listen in namespace %s: %v", ns, res.err)
	}
	return res.ln
}
