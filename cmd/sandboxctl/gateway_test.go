package main

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/egress/gateway"
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
	c := &gateway.Client{URL: "http://" + addrs[1], Token: token}
	reg, err := c.Register(ctx, "sb-1", []engine.Secret{{Name: "KEY", Value: "sk-0123456789abcdefghij", Hosts: []string{"api.example.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	status := func(cred string) int {
		pu := &url.URL{Scheme: "http", Host: addrs[0]}
		if cred != "" {
			pu.User = url.User(cred)
		}
		hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
		defer hc.CloseIdleConnections()
		// The host's loopback: the sandbox's proxy refuses it, which shows the
		// credential got the request that far.
		resp, err := hc.Get("http://127.0.0.1:1/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
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
