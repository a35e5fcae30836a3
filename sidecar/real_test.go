package sidecar

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// TestRealSidecar runs the client against a real `sandbox-mcp api`, built once.
func TestRealSidecar(t *testing.T) {
	bin := sidecartest.Build(t)
	t.Run("ExposeStatus", func(t *testing.T) { testExposeStatus(t, realSidecar(t, bin)) })
	t.Run("LongName", func(t *testing.T) { testLongName(t, realSidecar(t, bin)) })
}

// realSidecar starts bin and returns a client for it.
func realSidecar(t *testing.T, bin string) *Client {
	t.Helper()
	s := sidecartest.Start(t, bin)
	c, err := New(Options{BaseURL: s.URL, Token: sidecartest.Token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ExposeStatus decodes what the server writes (apitype.ExposeStatus); it used
// to decode apitype.ExposeResponse and lost every field but the port.
func testExposeStatus(t *testing.T, c *Client) {
	ctx := t.Context()
	st, err := c.ExposeStatus(ctx)
	if err != nil {
		t.Fatalf("ExposeStatus() before any expose = %v", err)
	}
	if st.ExposedPort != nil || st.PreviewAddr == "" {
		t.Errorf("ExposeStatus() before any expose = %+v, want no port and the proxy's address", st)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	// No Caddy at the configured admin endpoint: 502, but the port is recorded
	// and the preview proxy serves it.
	_, err = c.Expose(ctx, port)
	var ae *APIError
	if err != nil && (!errors.As(err, &ae) || ae.Status != 502) {
		t.Fatalf("Expose(%d) = %v, want success or a 502", port, err)
	}
	st, err = c.ExposeStatus(ctx)
	if err != nil {
		t.Fatalf("ExposeStatus() = %v", err)
	}
	want := apitype.ExposeStatus{ExposedPort: &port, UpstreamPort: &port, Upstream: "exposed", PreviewAddr: st.PreviewAddr, CaddyRouted: false, CaddyError: st.CaddyError}
	if st.ExposedPort == nil || *st.ExposedPort != port || st.UpstreamPort == nil || *st.UpstreamPort != port ||
		st.Upstream != want.Upstream || st.CaddyRouted || st.CaddyError == "" || !strings.HasPrefix(st.PreviewAddr, "127.0.0.1:") {
		t.Errorf("ExposeStatus() = %+v, want port %d exposed and upstream, Caddy not routed with a reason", st, port)
	}
}

// A name of 65–100 bytes is refused by the sidecar with the message of the
// one rule the host side uses too.
func testLongName(t *testing.T, c *Client) {
	for _, n := range []int{rules.MaxNameLen + 1, 100} {
		name := strings.Repeat("n", n)
		_, err := c.StartService(t.Context(), apitype.StartServiceRequest{Name: name, Command: "true"})
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 400 || ae.Message != rules.ValidateName(name).Error() {
			t.Errorf("StartService(%d-byte name) = %v, want 400 %q", n, err, rules.ValidateName(name))
		}
	}
}
