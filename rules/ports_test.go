package rules_test

import (
	"net"
	"strconv"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/caddyfile"
	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/preview"
	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Addresses must be constants where they are declared, so they spell the
// port out; this keeps every spelling equal to the one rule.
func TestAddressesUsePorts(t *testing.T) {
	port := func(addr string) int {
		_, p, err := net.SplitHostPort(addr)
		n, _ := strconv.Atoi(p)
		if err != nil {
			t.Errorf("SplitHostPort(%q): %v", addr, err)
		}
		return n
	}
	tests := []struct {
		what string
		got  int
		want int
	}{
		{"config.DefaultAddr", port(config.DefaultAddr), rules.PortSidecar},
		{"config.DefaultSidecarURL", port(config.DefaultSidecarURL[len("http://"):]), rules.PortSidecar},
		{"config.DefaultPreviewAddr", port(config.DefaultPreviewAddr), rules.PortPreviewProxy},
		{"caddyfile.DefaultAPI", port(caddyfile.DefaultAPI), rules.PortSidecar},
		{"caddyfile.DefaultVSCode", port(caddyfile.DefaultVSCode), rules.PortVSCode},
		{"caddyfile.DefaultPreview", port(caddyfile.DefaultPreview), rules.PortPreviewProxy},
		{"caddyfile.DefaultSite", port(caddyfile.DefaultSite), rules.PortPreview},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s port = %d, want %d", tt.what, tt.got, tt.want)
		}
	}
	for _, got := range [][]int{caddyfile.DefaultFallbackPorts, preview.DefaultFallbackPorts, provider.DevServerPorts()} {
		if len(got) != len(rules.FallbackPorts()) {
			t.Fatalf("fallback ports %v, want %v", got, rules.FallbackPorts())
		}
		for i, p := range rules.FallbackPorts() {
			if got[i] != p {
				t.Errorf("fallback ports %v, want %v", got, rules.FallbackPorts())
			}
		}
	}
}
