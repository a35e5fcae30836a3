package modal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modalnet"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestEngineEgressHosts: Spec.EgressHosts go through the adapter, Modal's SDK (its
// outbound CIDR and domain allow-lists) and real gRPC to the local server, whose
// engine enforces them: a sandbox allowed this machine's address (which the local
// engine refuses unless listed) reaches a server of the test there; one allowed only
// names does not. A malformed entry fails before any call, naming it.
func TestEngineEgressHosts(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl (the sandboxes run the host's)")
	}
	ip := testutil.HostIPv4()
	if ip == "" {
		t.Skip("no non-loopback IPv4 address to serve on")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "reached") })}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(); <-done })
	target := "http://" + ln.Addr().String() + "/"

	_, env := localServer(t, modaltest.Engine(t, local.EngineOptions{}))
	e := newProvider(t, env).Engine()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	get := func(hosts []string) (string, int) {
		t.Helper()
		info, err := e.Create(ctx, engine.Spec{Egress: true, EgressHosts: hosts})
		if err != nil {
			t.Fatalf("Create with EgressHosts %q: %v", hosts, err)
		}
		defer e.Terminate(context.Background(), info.ID)
		var out bytes.Buffer
		code, err := e.Exec(ctx, info.ID, engine.ExecRequest{Argv: []string{"curl", "-fsS", "--max-time", "10", target}, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatalf("Exec curl: %v", err)
		}
		return out.String(), code
	}
	if out, code := get([]string{"registry.npmjs.org", ip + "/32"}); code != 0 || out != "reached" {
		t.Errorf("with %s allowed, GET %s = %q (exit %d), want %q", ip, target, out, code, "reached")
	}
	if out, code := get([]string{"registry.npmjs.org", "*.example.com"}); code == 0 {
		t.Errorf("with only names allowed, GET %s = %q, want refused", target, out)
	}
	for _, bad := range []string{"*.*", "https://example.com", "10.0.0.0/33", "0x7f.1"} {
		_, err := e.Create(ctx, engine.Spec{Egress: true, EgressHosts: []string{"example.com", bad}})
		if !errors.Is(err, modalnet.ErrBadEntry) || !strings.Contains(err.Error(), bad) {
			t.Errorf("Create with EgressHosts entry %q = %v, want ErrBadEntry naming it", bad, err)
		}
	}
}
