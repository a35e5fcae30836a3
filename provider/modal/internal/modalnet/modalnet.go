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
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// ErrBadEntry marks an allow-list entry that is neither an IP address, a CIDR
// prefix, a host name, "*.host.name" nor "*".
var ErrBadEntry = errors.New("not an IP address, CIDR prefix, host name, *.suffix or *")

// Split sorts EgressHosts into Modal's outbound allow-lists: cidrs holds every IP
// address (as a /32 or /128) and CIDR prefix, canonical (masked; IPv4-mapped IPv6
// written as IPv4); domains holds every host name, "*.suffix" and "*", canonical
// (lower case, no trailing dot). Each entry lands in exactly one list; the first bad
// entry is an error naming it.
func Split(hosts []string) (cidrs, domains []string, err error) {
	cidrs, domains = []string{}, []string{}
	for _, h := range hosts {
		if p, err := ParseCIDR(h); err == nil {
			cidrs = append(cidrs, p.String())
			continue
		}
		d, err := ParseDomain(h)
		if err != nil {
			return nil, nil, fmt.Errorf("egress host %q: %w", h, ErrBadEntry)
		}
		domains = append(domains, d)
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
		p, err := ParseCIDR(c)
		if err != nil {
			return nil, fmt.Errorf("allowed CIDR %q: not an IP address or CIDR prefix", c)
		}
		hosts = append(hosts, p.String())
	}
	for _, d := range domains {
		name, err := ParseDomain(d)
		if err != nil {
			return nil, fmt.Errorf("allowed domain %q: not a host name, *.suffix or *", d)
		}
		hosts = append(hosts, name)
	}
	return hosts, nil
}

// ParseCIDR parses an IP address (without a zone) or a CIDR prefix into a masked
// prefix; an address becomes a prefix of its full length. IPv4 in IPv6
// (::ffff:a.b.c.d, or such a prefix of 96 bits or more) becomes IPv4, as the engine
// judges it.
func ParseCIDR(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if ip.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("address %q has a zone", s)
	}
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), nil
}

// ParseDomain parses "*", "*.host.name" or a host name into its canonical form. A
// host name is labels of 1–63 letters, digits, '-' and '_', none starting or ending
// with '-', 253 bytes at most, whose last label is not a number (decimal or 0x…): no
// spelling of an IPv4 address passes as a name.
func ParseDomain(s string) (string, error) {
	if s == "*" {
		return s, nil
	}
	wild := strings.HasPrefix(s, "*.")
	name, ok := hostName(strings.TrimPrefix(s, "*."))
	if !ok {
		return "", fmt.Errorf("domain %q: %w", s, ErrBadEntry)
	}
	if wild {
		return "*." + name, nil
	}
	return name, nil
}

// hostName returns s as a canonical host name (lower case, without a trailing dot).
func hostName(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'A' <= c && c <= 'Z':
			b[i] = c + 'a' - 'A'
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return "", false
		}
	}
	labels := strings.Split(string(b), ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", false
		}
	}
	if numeric(labels[len(labels)-1]) {
		return "", false
	}
	return string(b), true
}

// numeric reports whether l reads as a number in some inet_aton spelling.
func numeric(l string) bool {
	if hex, ok := strings.CutPrefix(l, "0x"); ok {
		l = hex
		for _, c := range l {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
