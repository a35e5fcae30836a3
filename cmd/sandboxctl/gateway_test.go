package main

import (
	"context"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func TestGatewayFlags(t *testing.T) {
	if _, err := parse(t, NewCmdGateway, "--token-env", "NOPE"); err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Errorf("gateway without a token = %v, want the variable named", err)
	}
}

// TestGatewayServe runs the gateway command, registers a sandbox on its admin
// listener and sends a request through it with and without the credential.
func TestGatewayServe(t *testing.T) {
	const token = "gateway-admin-token-0123"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ready := make(chan [2]string, 1)
	var out, errOut strings.Builder
	f := newFactory(func(k string) string {
		if k == "GW_TOKEN" {
			return token
		}
		return ""
	}, strings.NewReader(""), &out, &errOut)
	cmd := NewCmdGateway(f, func(o *GatewayOptions) error {
		o.Ctx, o.Addr, o.Admin = ctx, "127.0.0.1:0", "127.0.0.1:0"
		o.Ready = func(addr, admin string) { ready <- [2]string{addr, admin} }
		return gatewayRun(o)
	})
	cmd.SetArgs([]string{"--token-env", "GW_TOKEN"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	var addrs [2]string
	select {
	case addrs = <-ready:
	case err := <-done:
		t.Fatalf("gateway = %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the gateway did not start in 30 s")
	}
	// The printed lines are what a create needs: the engines' gateway comes from them.
	exported := exports(out.String())
	if want := map[string]string{provider.EnvEgressGateway: addrs[0], provider.EnvEgressGatewayAdminURL: "http://" + addrs[1],
		provider.EnvEgressGatewayAdminToken: token}; !maps.Equal(exported, want) {
		t.Errorf("gateway printed %q, want %q", exported, want)
	}
	g, err := gatewayFromEnv(func(k string) string { return exported[k] })
	if err != nil || g == nil || g.Addr != addrs[0] {
		t.Fatalf("gatewayFromEnv(the printed lines) = %+v, %v; want the gateway at %s", g, err, addrs[0])
	}
	reg, err := g.Registrar.Register(ctx, "sb-1", []engine.Secret{{Name: "KEY", Value: "sk-0123456789abcdefghij", Hosts: []string{"api.example.com"}}}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	status := func(cred string) int {
		pu := &url.URL{Scheme: "http", Host: addrs[0]}
		if cred != "" {
			pu.User = url.User(cred)
		}
		return throughGateway(t, pu)
	}
	if got := status(reg.Credential); got != http.StatusForbidden {
		t.Errorf("with the credential = %d, want 403 from the sandbox's egress policy", got)
	}
	if got := status("wrong"); got != http.StatusProxyAuthRequired {
		t.Errorf("with a wrong credential = %d, want 407", got)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("gateway after cancel = %v", err)
	}
}

// exports are the KEY=VALUE of the `export` lines in out (values unquoted only when
// plain).
func exports(out string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if kv, ok := strings.CutPrefix(line, "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			m[k] = v
		}
	}
	return m
}

func TestGatewayFromEnv(t *testing.T) {
	all := map[string]string{provider.EnvEgressGateway: "gw.example.com:8090",
		provider.EnvEgressGatewayAdminURL: "http://127.0.0.1:8091", provider.EnvEgressGatewayAdminToken: "gateway-admin-token-0123"}
	without := func(k string) map[string]string {
		m := maps.Clone(all)
		delete(m, k)
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    string // the gateway's address; "" for none
		wantErr string // a part of the error
	}{
		{"none", nil, "", ""},
		{"all", all, "gw.example.com:8090", ""},
		{"no address", without(provider.EnvEgressGateway), "", provider.EnvEgressGateway},
		{"no admin URL", without(provider.EnvEgressGatewayAdminURL), "", provider.EnvEgressGatewayAdminURL},
		{"no token", without(provider.EnvEgressGatewayAdminToken), "", provider.EnvEgressGatewayAdminToken},
		{"an address without a port", map[string]string{provider.EnvEgressGateway: "gw.example.com",
			provider.EnvEgressGatewayAdminURL: "http://127.0.0.1:8091", provider.EnvEgressGatewayAdminToken: "x"}, "", "host:port"},
	}
	for _, tt := range tests {
		g, err := gatewayFromEnv(func(k string) string { return tt.env[k] })
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: gatewayFromEnv = %v, want an error naming %s", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: gatewayFromEnv = %v", tt.name, err)
		case tt.want == "" && g != nil, tt.want != "" && (g == nil || g.Addr != tt.want || g.Registrar == nil):
			t.Errorf("%s: gatewayFromEnv = %+v, want the gateway at %q", tt.name, g, tt.want)
		}
	}
	// A half-configured gateway fails the backend before anything is made, whatever
	// the command (Modal's and E2B's backends both read it).
	for _, name := range []string{"modal", "e2b"} {
		env := without(provider.EnvEgressGatewayAdminToken)
		env[provider.EnvE2BAPIKey] = "e2b_0123"
		_, err := openBackend(t.Context(), name, backendOptions{Getenv: func(k string) string { return env[k] }})
		if err == nil || !strings.Contains(err.Error(), provider.EnvEgressGatewayAdminToken) {
			t.Errorf("open %s with a half-configured gateway = %v, want an error naming %s", name, err, provider.EnvEgressGatewayAdminToken)
		}
	}
}

// TestCreateLLMKeysHint: a boot whose LLM key the engine cannot keep out of the
// sandbox (an unisolated one) is refused, naming --llm-keys-in-sandbox, and the key is
// not in what is printed.
func TestCreateLLMKeysHint(t *testing.T) {
	const key = "sk-ant-api03-HINTVALUE0123456789abcdefghij"
	home := t.TempDir()
	var out, errOut strings.Builder
	code := run(t.Context(), []string{"--unisolated", "--data-dir", t.TempDir(), "create", "--env", "ANTHROPIC_API_KEY=" + key},
		func(k string) string {
			if k == "HOME" {
				return home
			}
			return ""
		}, nil, &out, &errOut)
	if code == 0 || !strings.Contains(errOut.String(), "--llm-keys-in-sandbox") {
		t.Errorf("create with an LLM key on an unisolated engine = %d %q, want a refusal naming --llm-keys-in-sandbox", code, errOut.String())
	}
	if strings.Contains(out.String()+errOut.String(), key) {
		t.Error("the refusal printed the key")
	}
}

// TestReachable: a listener's address as printed for sandboxes: a given host as it
// is, an unspecified one replaced by the machine's address.
func TestReachable(t *testing.T) {
	want := "0.0.0.0:8090"
	if ip := testutil.HostIPv4(); ip != "" {
		want = net.JoinHostPort(ip, "8090")
	}
	for _, tt := range []struct{ addr, want string }{
		{"127.0.0.1:8090", "127.0.0.1:8090"},
		{"10.1.2.3:8090", "10.1.2.3:8090"},
		{"0.0.0.0:8090", want},
	} {
		a, err := net.ResolveTCPAddr("tcp", tt.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := reachable(a); got != tt.want {
			t.Errorf("reachable(%q) = %q, want %q", tt.addr, got, tt.want)
		}
	}
}
