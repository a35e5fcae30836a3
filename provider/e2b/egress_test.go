package e2b_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// hostAddr is a non-loopback IPv4 address of this machine: a server there stands for
// "the outside", which a sandbox reaches only through the engine's egress proxy and
// only when its egress hosts list it.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback address")
	return ""
}

// TestEngineEgressHosts: Spec.EgressHosts become E2B's allowOut under a denyOut of
// everything, which the local server turns into the engine's egress hosts: a sandbox
// reaches a listed destination and not an unlisted one, and one without egress
// reaches nothing.
func TestEngineEgressHosts(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl (the default root's programs are the host's)")
	}
	ip := hostAddr(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "outside") })}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	url := "http://" + ln.Addr().String() + "/"

	srv := e2btest.Start(t, e2btest.Options{SandboxMCP: sandboxMCP, Egress: true})
	eng, err := e2b.NewEngine(srv.Client(t), e2b.EngineOptions{Template: "base", Timeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		spec  engine.Spec
		reach bool
	}{
		{"listed", engine.Spec{Egress: true, EgressHosts: []string{ip}}, true},
		{"unlisted", engine.Spec{Egress: true, EgressHosts: []string{"registry.npmjs.org"}}, false},
		{"no egress", engine.Spec{}, false},
	} {
		in, err := eng.Create(t.Context(), tt.spec)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		t.Cleanup(func() { _ = eng.Terminate(context.Background(), in.ID) })
		var out bytes.Buffer
		code, err := eng.Exec(t.Context(), in.ID, engine.ExecRequest{Argv: []string{"curl", "-sS", "--max-time", "10", url}, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		if got := code == 0 && out.String() == "outside"; got != tt.reach {
			t.Errorf("%s: curl %s = %d %q, want reached %v", tt.name, url, code, out.String(), tt.reach)
		}
	}
}
