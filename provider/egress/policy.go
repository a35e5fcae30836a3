// Package egress is a sandbox's way out: an HTTP proxy (plain requests and CONNECT)
// that dials on the host's side, after checking every destination against the
// sandbox's policy (Spec.EgressHosts). The local engine serves one per sandbox with
// egress; the gateway serves the same proxy to sandboxes of remote engines.
package egress

// What the egress proxy lets a sandbox reach. Every destination is checked
// where it is dialed, after name resolution, on the address actually dialed
// (so a name cannot resolve to one address for the check and another for the
// connection):
//
//   - never the host's loopback, unspecified (0.0.0.0 and :: reach the
//     host's loopback) or multicast addresses, whatever the allow-list says;
//   - not the host's own interface addresses, the subnets its interfaces
//     are directly connected to (its neighbours and gateway), nor any range
//     of the IANA special-purpose registries (private, link-local, carrier-
//     grade NAT, documentation, benchmarking, AS112, ...) nor IPv6 outside
//     global unicast, where cloud metadata services and the host's
//     neighbours live, unless an EgressHosts entry (an IP address or CIDR
//     prefix) names them;
//   - IPv4 addresses carried in IPv6 (v4-mapped, v4-compatible, SIIT,
//     NAT64, 6to4) are judged as the IPv4 address; Teredo and local-use
//     NAT64 are refused outright;
//   - with EgressHosts, only the names it lists ("api.example.com", or
//     "*.example.com" for any name below example.com; "*" for any name) and
//     the addresses it lists.
//
// Authorities are parsed strictly: host names are LDH labels whose last label
// is not numeric, IPv4 literals are dotted quads without leading zeros, IPv6
// literals are bracketed and have no zone. The other spellings of an address
// (2130706433, 0x7f.1, 127.1, 0177.0.0.1) are refused rather than guessed at.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/egresshost"
)

// ErrRefused marks a destination the policy refuses (403 to the sandbox).
var ErrRefused = errors.New("refused by the sandbox's egress policy")

// ErrBadAuthority marks a host:port the proxy does not parse (400).
var ErrBadAuthority = errors.New("bad host:port")

type addrRange struct {
	prefix netip.Prefix
	why    string
	// hard ranges are refused even when an EgressHosts entry covers them.
	hard bool
	// named ranges are not routed on the internet and hold no host's own
	// services or neighbours by definition (documentation, benchmarking,
	// anycast services, unallocated space): a name EgressHosts lists exactly
	// may resolve into one (some networks answer every name with such an
	// address and route it to the internet). The others (private, link-local,
	// the host's own) only an address or prefix entry opens.
	named bool
}

// refusedRanges are the IANA special-purpose registries (IPv4 and IPv6, RFC
// 6890 and its updates) with multicast and the limited broadcast: none is an
// ordinary public host, and several are where a host's own services, its
// neighbours and cloud metadata live. The hard ones reach the host itself.
var refusedRanges = func() []addrRange {
	const named = true
	rs := []struct {
		p, why      string
		hard, named bool
	}{
		{"0.0.0.0/8", "this-network (reaches the host's loopback)", true, false},
		{"127.0.0.0/8", "loopback", true, false},
		{"224.0.0.0/4", "multicast", true, false},
		{"255.255.255.255/32", "broadcast", true, false},
		{"::/128", "unspecified (reaches the host's loopback)", true, false},
		{"::1/128", "loopback", true, false},
		{"ff00::/8", "multicast", true, false},
		{"10.0.0.0/8", "private", false, false},
		{"172.16.0.0/12", "private", false, false},
		{"192.168.0.0/16", "private", false, false},
		{"100.64.0.0/10", "carrier-grade NAT", false, false},
		{"169.254.0.0/16", "link-local (cloud metadata)", false, false},
		{"192.0.0.0/24", "IETF protocol assignments", false, false},
		{"192.0.2.0/24", "documentation (TEST-NET-1)", false, named},
		{"192.31.196.0/24", "AS112", false, named},
		{"192.52.193.0/24", "AMT", false, named},
		{"192.88.99.0/24", "6to4 relay anycast", false, named},
		{"192.175.48.0/24", "AS112 direct delegation", false, named},
		{"198.18.0.0/15", "benchmarking", false, named},
		{"198.51.100.0/24", "documentation (TEST-NET-2)", false, named},
		{"203.0.113.0/24", "documentation (TEST-NET-3)", false, named},
		{"240.0.0.0/4", "reserved", false, named},
		{"fc00::/7", "unique local", false, false},
		{"fe80::/10", "link-local", false, false},
		{"fec0::/10", "site-local", false, false},
		{"100::/64", "discard-only", false, false},
		{"100:0:0:1::/64", "dummy prefix", false, named},
		{"2001::/32", "Teredo", false, false},
		{"2001::/23", "IETF protocol assignments", false, named},
		{"2001:db8::/32", "documentation", false, named},
		{"3fff::/20", "documentation", false, named},
		{"2620:4f:8000::/48", "AS112 direct delegation", false, named},
		{"5f00::/16", "segment routing (SRv6) SIDs", false, named},
		{"64:ff9b:1::/48", "local-use NAT64", false, false},
	}
	out := make([]addrRange, len(rs))
	for i, r := range rs {
		out[i] = addrRange{netip.MustParsePrefix(r.p), r.why, r.hard, r.named}
	}
	return out
}()

// embeddedV4 is the IPv4 address that ip, an IPv6 address, reaches in a
// form that carries one: v4-mapped (::ffff:a.b.c.d), SIIT (::ffff:0:a.b.c.d),
// NAT64 (64:ff9b::a.b.c.d), 6to4 (2002:AABB:CCDD::) and the deprecated
// v4-compatible form (::a.b.c.d).
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	low := netip.AddrFrom4([4]byte(b[12:]))
	zero := func(p []byte) bool {
		for _, x := range p {
			if x != 0 {
				return false
			}
		}
		return true
	}
	switch {
	case ip.Is4In6():
		return ip.Unmap(), true
	case zero(b[:12]):
		return low, true
	case zero(b[:8]) && b[8] == 0xff && b[9] == 0xff && b[10] == 0 && b[11] == 0:
		return low, true
	case b[0] == 0 && b[1] == 0x64 && b[2] == 0xff && b[3] == 0x9b && zero(b[4:12]):
		return low, true
	case b[0] == 0x20 && b[1] == 0x02:
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// classify says why no sandbox may reach ip ("" when it is a public
// address) and whether even an allow-list entry cannot change that.
func classify(ip netip.Addr) (why string, hard bool) {
	r := classifyRange(ip)
	return r.why, r.hard
}

// classifyRange is the refused range ip is in (a zero why when none).
func classifyRange(ip netip.Addr) addrRange {
	ip = ip.WithZone("")
	if !ip.IsValid() {
		return addrRange{why: "not an address", hard: true}
	}
	if ip == netip.IPv6Unspecified() || ip == netip.IPv6Loopback() {
		return refusedRange(ip)
	}
	if v4, ok := embeddedV4(ip); ok {
		r := refusedRange(v4)
		if r.why != "" {
			r.why += " (IPv4 in IPv6)"
		}
		return r
	}
	if r := refusedRange(ip); r.why != "" {
		return r
	}
	if ip.Is6() && !globalUnicast6.Contains(ip) {
		return addrRange{why: "outside IPv6 global unicast (2000::/3)", named: true}
	}
	return addrRange{}
}

// globalUnicast6 is where every public IPv6 host is; the rest of the space
// is special (above) or unallocated.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

func refusedRange(ip netip.Addr) addrRange {
	for _, r := range refusedRanges {
		if r.prefix.Contains(ip) {
			return r
		}
	}
	return addrRange{}
}

// Policy is a sandbox's Spec.EgressHosts, parsed.
type Policy struct {
	// anyName: no list, or "*": any host name.
	anyName bool
	// anyAddr: no list: any public IP literal.
	anyAddr  bool
	names    map[string]bool
	suffixes []string // ".example.com"
	addrs    []netip.Prefix
}

// NewPolicy parses EgressHosts (egresshost's grammar: host names, "*.suffix"
// patterns, "*", IP addresses and CIDR prefixes).
func NewPolicy(hosts []string) (*Policy, error) {
	p := &Policy{names: map[string]bool{}, anyName: len(hosts) == 0, anyAddr: len(hosts) == 0}
	for _, h := range hosts {
		e, err := egresshost.Parse(h)
		if err != nil {
			return nil, err
		}
		switch e.Kind {
		case egresshost.AnyName:
			p.anyName = true
		case egresshost.Suffix:
			p.suffixes = append(p.suffixes, "."+e.Name)
		case egresshost.Prefix:
			p.addrs = append(p.addrs, e.Prefix)
		default:
			p.names[e.Name] = true
		}
	}
	return p, nil
}

// AllowHost checks the destination as the sandbox named it: host is a
// canonical host name, or ip is valid for an IP literal.
func (p *Policy) AllowHost(host string, ip netip.Addr) error {
	if ip.IsValid() {
		if p.anyAddr || p.listed(ip) {
			return nil
		}
		return fmt.Errorf("%s is not in the sandbox's egress hosts: %w", ip, ErrRefused)
	}
	if p.anyName || p.names[host] {
		return nil
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(host, s) {
			return nil
		}
	}
	return fmt.Errorf("%s is not in the sandbox's egress hosts: %w", host, ErrRefused)
}

// listed reports whether an EgressHosts address or prefix covers ip.
func (p *Policy) listed(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	for _, a := range p.addrs {
		if a.Contains(ip) {
			return true
		}
	}
	return false
}

// CheckAddr checks an address about to be dialed; host holds the host's own
// interface addresses (unmapped, without zones). It is CheckAddrNets without
// the host's subnets.
func (p *Policy) CheckAddr(ip netip.Addr, host map[netip.Addr]bool) error {
	return p.CheckAddrNets(ip, addrPrefixes(host))
}

// addrPrefixes are addrs, each a prefix of its own (no subnet).
func addrPrefixes(addrs map[netip.Addr]bool) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(addrs))
	for a := range addrs {
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// CheckAddrNets checks an address about to be dialed against the policy, the
// special-purpose ranges and the host's interfaces, ifaces (LocalNets: each
// interface address with its prefix length): neither the host's own addresses
// nor the subnets it is directly connected to (its neighbours, its gateway,
// the subnet's broadcast address) are reachable unless an EgressHosts address
// or prefix names them.
func (p *Policy) CheckAddrNets(ip netip.Addr, ifaces []netip.Prefix) error {
	return p.CheckResolved("", ip, ifaces)
}

// CheckResolved is CheckAddrNets for ip, an address the host's resolver gave
// for host (the name the sandbox asked for; "" or the address's text for an
// IP literal). A name EgressHosts lists exactly may resolve into the ranges
// that are not routed on the internet (documentation, benchmarking, ...: see
// addrRange.named); never into the others.
func (p *Policy) CheckResolved(host string, ip netip.Addr, ifaces []netip.Prefix) error {
	ip = ip.WithZone("")
	r := classifyRange(ip)
	// The host's own network first: a name never opens it, whatever range it is in.
	why := hostNet(ip, ifaces)
	if v4, ok := embeddedV4(ip); ok && why == "" {
		why = hostNet(v4, ifaces)
	}
	switch {
	case r.hard:
		why = r.why
	case why == "" && r.why != "":
		if r.named && host != "" && p.names[host] {
			return nil
		}
		why = r.why
	}
	if why == "" || (!r.hard && p.listed(ip)) {
		return nil
	}
	return fmt.Errorf("%s is %s: %w", ip, why, ErrRefused)
}

// hostNet says whether ip is one of the host's interface addresses or in a
// subnet an interface is directly connected to ("" when neither).
func hostNet(ip netip.Addr, ifaces []netip.Prefix) string {
	ip = ip.Unmap()
	for _, f := range ifaces {
		a := f.Addr().WithZone("").Unmap()
		bits := f.Bits()
		if f.Addr().Is4In6() && bits >= 96 {
			bits -= 96
		}
		switch {
		case a == ip:
			return "an address of the host"
		case bits >= 0 && a.BitLen() == ip.BitLen() && netip.PrefixFrom(a, bits).Contains(ip):
			return "in a subnet the host is directly connected to (" + netip.PrefixFrom(a, bits).Masked().String() + ")"
		}
	}
	return ""
}

// LocalNets are the current network namespace's interface addresses, each
// with the prefix length of the subnet it is directly connected to.
func LocalNets() ([]netip.Prefix, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("list the host's interface addresses: %w", err)
	}
	out := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		ones, _ := n.Mask.Size()
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.Is4() && ones > 32 {
			ones -= 96
		}
		if p := netip.PrefixFrom(ip, ones); p.IsValid() {
			out = append(out, p)
		}
	}
	return out, nil
}

// ParseAuthority parses host:port as a proxy request names it. host is a
// canonical host name, or ip is valid (an IP literal; host is its text).
// Without a port, defaultPort is used; an empty defaultPort makes the port
// required.
func ParseAuthority(authority, defaultPort string) (host string, ip netip.Addr, port uint16, err error) {
	bad := func(why string) (string, netip.Addr, uint16, error) {
		return "", netip.Addr{}, 0, fmt.Errorf("%q: %s: %w", authority, why, ErrBadAuthority)
	}
	if authority == "" || len(authority) > 300 {
		return bad("empty or too long")
	}
	var h, p string
	hasPort := false
	if rest, ok := strings.CutPrefix(authority, "["); ok {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return bad("unclosed [")
		}
		h, rest = rest[:end], rest[end+1:]
		if rest != "" {
			if p, hasPort = strings.CutPrefix(rest, ":"); !hasPort {
				return bad("text after ]")
			}
		}
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return bad("not an IPv6 address in brackets")
		}
		ip = a
	} else {
		if strings.Count(authority, ":") > 1 {
			return bad("an IPv6 address needs brackets")
		}
		h, p, hasPort = strings.Cut(authority, ":")
		if a, err := netip.ParseAddr(h); err == nil {
			ip = a
		} else if name, ok := egresshost.HostName(h); ok {
			h = name
		} else {
			return bad("not a host name or an IP address")
		}
	}
	if hasPort && p == "" {
		return bad("empty port")
	}
	if !hasPort {
		if p = defaultPort; p == "" {
			return bad("no port")
		}
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 || p[0] < '1' || p[0] > '9' {
		return bad("port is not 1-65535")
	}
	if ip.IsValid() {
		h = ip.String()
	}
	return h, ip, uint16(n), nil
}
