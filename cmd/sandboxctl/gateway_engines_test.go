package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestGatewayModalCreate: `sandboxctl gateway` and `sandboxctl -p modal create
// --secret` over the local Modal server, wired only by the lines the gateway prints.
// Without them the create is refused; with them the sandbox holds a placeholder, not
// the value (in no process's environment), its HTTPS_PROXY is the gateway with a
// credential the gateway accepts, its trust names the user's copies, and the
// credential dies at terminate. (The data path through the gateway from inside a
// sandbox is gatewaytest's, in provider/modal and provider/e2b.)
func TestGatewayModalCreate(t *testing.T) {
	requireNamespaces(t)
	bins := buildBinaries(t)
	const (
		token = "gateway-admin-token-0123456789"
		value = "sk-ant-api03-CLIGATEWAY0123456789abcdefghij"
	)
	env := map[string]string{"SANDBOXCTL_SANDBOX_MCP": filepath.Join(bins, "sandbox-mcp"),
		"SANDBOXCTL_PROLIFERATE": filepath.Join(bins, "proliferate"), "HOME": t.TempDir(),
		modalserver.EnvSkipRunSteps: "1"}
	modalEnv := serveModalCmd(t, t.TempDir(), env)
	gwEnv := gatewayCmd(t, token)
	for k, v := range map[string]string{"MODAL_SERVER_URL": modalEnv[provider.EnvModalServerURL],
		"MODAL_CONFIG_PATH": filepath.Join(t.TempDir(), "none.toml"), "MODAL_PROFILE": "", "MODAL_ENVIRONMENT": ""} {
		t.Setenv(k, v)
	}
	client := maps.Clone(modalEnv)
	client["HOME"], client["N4_KEY"] = env["HOME"], value
	sctl := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := run(t.Context(), append([]string{"--provider", "modal"}, args...), func(k string) string { return client[k] }, nil, &o, &e)
		return o.String(), e.String(), code
	}
	if _, e, code := sctl("create", "--session", "gw-0", "--secret", "N4_KEY:api.example.com"); code == 0 || !strings.Contains(e, "egress gateway") {
		t.Errorf("create --secret without a gateway = %d %q, want a refusal naming the egress gateway", code, e)
	}
	maps.Copy(client, gwEnv)
	o, e, code := sctl("create", "--session", "gw-1", "--secret", "N4_KEY:api.example.com")
	if code != 0 {
		t.Fatalf("create --secret with the gateway = %d: %s", code, e)
	}
	id := strings.TrimSpace(strings.Split(o, "\n")[0])
	terminated := false
	defer func() {
		if !terminated {
			sctl("terminate", id)
		}
	}()
	inside := func(script string) string {
		t.Helper()
		o, e, code := sctl("exec", id, "--", "sh", "-c", script)
		if code != 0 {
			t.Fatalf("exec %q = %d: %s", script, code, e)
		}
		return o
	}
	if ph := inside(`printf %s "$N4_KEY"`); ph == value || !strings.HasPrefix(ph, "sk-ant-api03-") || len(ph) != len(value) {
		t.Errorf("inside, $N4_KEY = %q, want a placeholder of the value's shape", ph)
	}
	if environ := inside(`cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'`); strings.Contains(environ, value) || environ == "" {
		t.Errorf("the value is in a process's environment inside (or none was read: %d bytes)", len(environ))
	}
	if got := inside(`printf %s "$SSL_CERT_FILE"; grep -c 'BEGIN CERTIFICATE' "$NODE_EXTRA_CA_CERTS"`); got != rules.TrustUserBundleFile+"1\n" {
		t.Errorf("trust inside = %q, want SSL_CERT_FILE=%s and the authority in $NODE_EXTRA_CA_CERTS", got, rules.TrustUserBundleFile)
	}
	pu, err := url.Parse(inside(`printf %s "$HTTPS_PROXY"`))
	if err != nil || pu.Host != gwEnv[provider.EnvEgressGateway] || pu.User.Username() == "" {
		t.Fatalf("inside, HTTPS_PROXY = %v (%v), want the gateway %s with a credential", pu, err, gwEnv[provider.EnvEgressGateway])
	}
	status := func() int { return throughGateway(t, pu) }
	if got := status(); got != http.StatusForbidden {
		t.Errorf("through the gateway with the sandbox's credential = %d, want 403 from its egress policy", got)
	}
	terminated = true
	if _, e, code := sctl("terminate", id); code != 0 {
		t.Fatalf("terminate = %d: %s", code, e)
	}
	if got := status(); got != http.StatusProxyAuthRequired {
		t.Errorf("with the credential after terminate = %d, want 407", got)
	}
}

// gatewayCmd runs `sandboxctl gateway` on loopback with the admin token in its
// default variable until the test ends, and returns the variables it exported.
func gatewayCmd(t *testing.T, token string) map[string]string {
	return runExporting(t, []string{"gateway", "--addr", "127.0.0.1:0", "--admin", "127.0.0.1:0"},
		map[string]string{provider.EnvEgressGatewayAdminToken: token}, provider.EnvEgressGatewayAdminToken)
}

// runExporting runs sandboxctl with args and env until the test ends, and returns
// the variables of its `export` lines once they include key (at most 30 s).
func runExporting(t *testing.T, args []string, env map[string]string, key string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	var out, errOut testutil.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, func(k string) string { return env[k] }, nil, &out, &errOut) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("sandboxctl %s exited %d: %s", args[0], code, errOut.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if m := exports(out.String()); m[key] != "" {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandboxctl %s printed no export of %s in 30 s: %q %q", args[0], key, out.String(), errOut.String())
		}
	}
}

// throughGateway is the status of a request to the host's loopback through the
// gateway proxy pu (with its credential): the sandbox's egress policy refuses it
// (403), which shows the credential got the request past the gateway's check (407
// otherwise).
func throughGateway(t *testing.T, pu *url.URL) int {
	t.Helper()
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://127.0.0.1:1/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestGatewayE2BBackend: the E2B backend over the local E2B server, given the lines
// `sandboxctl gateway` prints, creates a sandbox with a secret through the gateway:
// a placeholder inside, HTTPS_PROXY the gateway with a credential it accepts until
// terminate. Without them, the secret is refused.
func TestGatewayE2BBackend(t *testing.T) {
	const value = "sk-ant-api03-E2BGATEWAY0123456789abcdefghij"
	e2bEnv := serveE2BEnv(t, t.TempDir())
	gwEnv := gatewayCmd(t, "gateway-admin-token-0123456789")
	spec := engine.Spec{Egress: true, Secrets: []engine.Secret{{Name: "N4_KEY", Value: value, Hosts: []string{"api.example.com"}}}}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	plain, err := newE2BBackend(ctx, backendOptions{Getenv: func(k string) string { return e2bEnv[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Engine.Create(ctx, spec); !errors.Is(err, engine.ErrUnsupported) || !strings.Contains(err.Error(), "gateway") {
		t.Errorf("create with a secret without a gateway = %v, want ErrUnsupported naming the gateway", err)
	}
	env := maps.Clone(e2bEnv)
	maps.Copy(env, gwEnv)
	b, err := newE2BBackend(ctx, backendOptions{Getenv: func(k string) string { return env[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	info, err := b.Engine.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create with a secret through the gateway: %v", err)
	}
	terminated := false
	defer func() {
		if !terminated {
			_ = b.Engine.Terminate(context.WithoutCancel(ctx), info.ID)
		}
	}()
	inside := func(script string) string {
		t.Helper()
		var out strings.Builder
		if code, err := b.Engine.Exec(ctx, info.ID, execRequest([]string{"sh", "-c", script}, &out)); err != nil || code != 0 {
			t.Fatalf("exec %q = %d, %v: %s", script, code, err, out.String())
		}
		return out.String()
	}
	if ph := inside(`printf %s "$N4_KEY"`); ph == value || !strings.HasPrefix(ph, "sk-ant-api03-") || len(ph) != len(value) {
		t.Errorf("inside, $N4_KEY = %q, want a placeholder of the value's shape", ph)
	}
	pu, err := url.Parse(inside(`printf %s "$HTTPS_PROXY"`))
	if err != nil || pu.Host != gwEnv[provider.EnvEgressGateway] || pu.User.Username() == "" {
		t.Fatalf("inside, HTTPS_PROXY = %v (%v), want the gateway %s with a credential", pu, err, gwEnv[provider.EnvEgressGateway])
	}
	if got := throughGateway(t, pu); got != http.StatusForbidden {
		t.Errorf("through the gateway with the sandbox's credential = %d, want 403 from its egress policy", got)
	}
	terminated = true
	if err := b.Engine.Terminate(ctx, info.ID); err != nil {
		t.Fatal(err)
	}
	if got := throughGateway(t, pu); got != http.StatusProxyAuthRequired {
		t.Errorf("with the credential after terminate = %d, want 407", got)
	}
}
