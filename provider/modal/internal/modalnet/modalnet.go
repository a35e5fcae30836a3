// Package modalnet translates a sandbox's outbound allow-list between the engine's
// form (engine.Spec.EgressHosts: host names, "*.suffix" patterns, "*", IP addresses
// and CIDR prefixes in one list) and Modal's (a sandbox definition's NetworkAccess
// ALLOWLIST: AllowedCidrs and AllowedDomains). The Modal adapter (provider/modal)
// splits EgressHosts into the two lists; the local Modal server
// (provider/modal/modalserver) validates the two lists an SDK sends and joins them
// back into EgressHosts for its engine. Both sides parse entries here, strictly, so
// what one accepts the other does.
package modalnet

import (
	"fmt"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/egresshost"
)

// ErrBadEntry marks an allow-list entry in none of egresshost's forms.
var ErrBadEntry = egresshost.ErrBadEntry

// Split sorts EgressHosts into Modal's outbound allow-lists: cidrs holds every IP
// address (as a /32 or /128) and CIDR prefix, domains every host name, "*.suffix" and
// "*", each in egresshost's canonical form. Each entry lands in exactly one list; the
// first bad entry is an error naming it.
func Split(hosts []string) (cidrs, domains []string, err error) {
	cidrs, domains = []string{}, []string{}
	for _, h := range hosts {
		e, err := egresshost.Parse(h)
		if err != nil {
			return nil, nil, err
		}
		if e.Kind == egresshost.Prefix {
			cidrs = append(cidrs, e.String())
		} else {
			domains = append(domains, e.String())
		}
	}
	return cidrs, domains, nil
}

// Join is the engine's EgressHosts for Modal's two allow-lists: every entry of cidrs
// must be an IP address or CIDR prefix, every entry of domains a host name,
// "*.suffix" or "*"; both come out canonical, cidrs first. The first entry in the
// wrong list, or in neither form, is an error naming it.
func Join(cidrs, domains []string) ([]string, error) {
	hosts := make([]string, 0, len(cidrs)+len(domains))
	for _, c := range cidrs {
		e, err := egresshost.Parse(c)
		if err != nil || e.Kind != egresshost.Prefix {
			return nil, fmt.Errorf("allowed CIDR %q: not an IP address or CIDR prefix", c)
		}
		hosts = append(hosts, e.String())
	}
	for _, d := range domains {
		e, err := egresshost.Parse(d)
		if err != nil || e.Kind == egresshost.Prefix {
			return nil, fmt.Errorf("allowed domain %q: not a host name, *.suffix or *", d)
		}
		hosts = append(hosts, e.String())
	}
	return hosts, nil
}
