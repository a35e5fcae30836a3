package e2bserver

import (
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/egresshost"
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
	allow := make([]string, 0, len(n.AllowOut))
	for _, h := range n.AllowOut {
		if !validDestination(h) {
			return nil, false, errBadRequest("network.allowOut entry %q: want an IP address, a CIDR block, a domain or *.domain", h)
		}
		e, _ := egresshost.Parse(h)
		allow = append(allow, e.String())
	}
	for _, d := range n.DenyOut {
		if d != e2bwire.DenyAll {
			return nil, false, errBadRequest("network.denyOut %q is not supported by the local E2B server: only %s (deny everything but allowOut)", d, e2bwire.DenyAll)
		}
	}
	if len(n.DenyOut) == 0 {
		return nil, false, nil
	}
	return allow, true, nil
}

// validDestination: an IP address, a CIDR block, or a domain name optionally led by
// "*." — the engine's egress grammar (egresshost) without its "*" (any name), which
// E2B's allowOut does not have.
func validDestination(h string) bool {
	e, err := egresshost.Parse(h)
	return err == nil && e.Kind != egresshost.AnyName
}
