package e2b

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// TestEgressRules: EgressHosts become allowOut under a denyOut of everything,
// and a spec that publishes no port keeps its port hosts private
// (allowPublicTraffic false).
func TestEgressRules(t *testing.T) {
	private := false
	for _, tc := range []struct {
		name string
		spec engine.Spec
		want *e2bwire.NetworkConfig
	}{
		{"ports, no egress hosts", engine.Spec{Ports: []int{4000}}, nil},
		{"ports, the whole outside", engine.Spec{Ports: []int{4000}, Egress: true}, nil},
		{"ports, any host", engine.Spec{Ports: []int{4000}, Egress: true, EgressHosts: []string{"*"}}, nil},
		{"ports, egress hosts", engine.Spec{Ports: []int{4000}, Egress: true, EgressHosts: []string{"example.com"}},
			&e2bwire.NetworkConfig{AllowOut: []string{"example.com"}, DenyOut: []string{e2bwire.DenyAll}}},
		{"no ports", engine.Spec{}, &e2bwire.NetworkConfig{AllowPublicTraffic: &private}},
		{"no ports, egress hosts", engine.Spec{Egress: true, EgressHosts: []string{"10.0.0.1"}},
			&e2bwire.NetworkConfig{AllowOut: []string{"10.0.0.1"}, DenyOut: []string{e2bwire.DenyAll}, AllowPublicTraffic: &private}},
	} {
		if diff := cmp.Diff(tc.want, egressRules(tc.spec)); diff != "" {
			t.Errorf("%s: egressRules(%+v) (-want +got):\n%s", tc.name, tc.spec, diff)
		}
	}
}
