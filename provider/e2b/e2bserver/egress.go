package e2bserver

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

// egressRules maps a create's network.allowOut and network.denyOut onto the engine's
// egress proxy, which allows either everything or a list of destinations
// (engine.Spec.EgressHosts). A denyOut of everything (0.0.0.0/0) makes allowOut the
// only destinations (only is true; an empty allowOut then means no egress at all);
// allowOut without a deny changes nothing, since E2B allows the rest anyway. A deny
// of some destinations only cannot be honoured and is refused, as is an allowOut entry
// that is not an IP address, a CIDR block, a domain or *.domain.
func egressRules(n *e2bwire.NetworkConfig) (hosts []string, only bool, err error) {
	if n == nil {
		return nil, false, nil
	}
	for _, h := range n.AllowOut {
		if !validDestination(h) {
			return nil, false, errBadRequest("network.allowOut entry %q: want an IP address, a CIDR block, a domain or *.domain", h)
		}
	}
	for _, d := range n.DenyOut {
		if d != e2bwire.DenyAll {
			return nil, false, errBadRequest("network.denyOut %q is not supported by the local E2B server: only %s (deny everything but allowOut)", d, e2bwire.DenyAll)
		}
	}
	if len(n.DenyOut) == 0 {
		return nil, false, nil
	}
	return slices.Clone(n.AllowOut), true, nil
}

// validDestination: an IP address, a CIDR block, or a domain name optionally led by
// "*." (letters, digits, hyphens; dot-separated labels of 1 to 63 characters).
func validDestination(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return !strings.Contains(h, "%")
	}
	if _, err := netip.ParsePrefix(h); err == nil {
		return true
	}
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}
