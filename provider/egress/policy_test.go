package egress

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/egresshost"
)

func TestEgressClassify(t *testing.T) {
	tests := []struct {
		ip       string
		refused  bool
		hard     bool
		contains string
	}{
		// Public.
		{"93.184.215.14", false, false, ""},
		{"8.8.8.8", false, false, ""},
		{"2606:4700::6810:84e5", false, false, ""},
		{"64:ff9b::808:808", false, false, ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", false, false, ""},  // 6to4 of 8.8.8.8
		{"::ffff:8.8.8.8", false, false, ""},
		{"172.32.0.1", false, false, ""},
		{"100.128.0.1", false, false, ""},
		// Never, whatever the allow-list.
		{"127.0.0.1", true, true, "loopback"},
		{"127.255.255.254", true, true, "loopback"},
		{"0.0.0.0", true, true, "this-network"},
		{"0.1.2.3", true, true, "this-network"},
		{"::", true, true, "unspecified"},
		{"::1", true, true, "loopback"},
		{"::ffff:127.0.0.1", true, true, "loopback (IPv4 in IPv6)"},
		{"::127.0.0.1", true, true, "loopback (IPv4 in IPv6)"},
		{"::ffff:0:127.0.0.1", true, true, "loopback (IPv4 in IPv6)"},
		{"64:ff9b::7f00:1", true, true, "loopback (IPv4 in IPv6)"},
		{"2002:7f00:1::", true, true, "loopback (IPv4 in IPv6)"},
		{"::ffff:0.0.0.0", true, true, "this-network"},
		{"224.0.0.1", true, true, "multicast"},
		{"255.255.255.255", true, true, "broadcast"},
		{"ff02::1", true, true, "multicast"},
		// Private, link-local, metadata: refused unless listed.
		{"10.0.0.1", true, false, "private"},
		{"172.16.5.4", true, false, "private"},
		{"172.31.255.255", true, false, "private"},
		{"192.168.1.1", true, false, "private"},
		{"100.64.0.1", true, false, "carrier-grade NAT"},
		{"100.100.100.200", true, false, "carrier-grade NAT"}, // Alibaba metadata
		{"169.254.169.254", true, false, "link-local"},        // AWS, GCP, Azure metadata
		{"192.0.0.192", true, false, "IETF"},                  // Oracle metadata
		{"198.18.0.1", true, false, "benchmarking"},
		{"240.0.0.1", true, false, "reserved"},
		{"fd00:ec2::254", true, false, "unique local"}, // AWS metadata over IPv6
		{"fc00::1", true, false, "unique local"},
		{"fe80::1", true, false, "link-local"},
		{"fe80::1%eth0", true, false, "link-local"},
		{"fec0::1", true, false, "site-local"},
		{"100::1", true, false, "discard-only"},
		{"2001::1", true, false, "Teredo"},
		{"64:ff9b:1::a00:1", true, false, "local-use NAT64"},
		// The rest of the IANA special-purpose registries.
		{"192.0.2.1", true, false, "TEST-NET-1"},
		{"192.0.2.255", true, false, "TEST-NET-1"},
		{"198.51.100.7", true, false, "TEST-NET-2"},
		{"203.0.113.200", true, false, "TEST-NET-3"},
		{"192.88.99.1", true, false, "6to4 relay"},
		{"192.31.196.1", true, false, "AS112"},
		{"192.175.48.6", true, false, "AS112"},
		{"192.52.193.1", true, false, "AMT"},
		{"192.0.0.9", true, false, "IETF"}, // PCP anycast
		{"198.19.255.255", true, false, "benchmarking"},
		{"255.255.255.254", true, false, "reserved"},
		{"::ffff:192.0.2.1", true, false, "TEST-NET-1) (IPv4 in IPv6)"},
		{"64:ff9b::c000:201", true, false, "TEST-NET-1"}, // NAT64 of 192.0.2.1
		{"2002:c633:6401::", true, false, "TEST-NET-2"},  // 6to4 of 198.51.100.1
		{"2001:db8::1", true, false, "documentation"},
		{"2001:db8:ffff::1", true, false, "documentation"},
		{"3fff::1", true, false, "documentation"},
		{"3fff:fff:ffff::1", true, false, "documentation"},
		{"2001:2::1", true, false, "IETF protocol assignments"},  // benchmarking
		{"2001:1::1", true, false, "IETF protocol assignments"},  // PCP anycast
		{"2001:20::1", true, false, "IETF protocol assignments"}, // ORCHIDv2
		{"2001:1ff::1", true, false, "IETF protocol assignments"},
		{"2620:4f:8000::1", true, false, "AS112"},
		{"100:0:0:1::1", true, false, "dummy"},
		{"5f00::1", true, false, "SRv6"},
		{"4000::1", true, false, "global unicast"}, // unallocated
		{"::2:3:4:5:6", true, false, "global unicast"},
		{"::ffff:255.255.255.255", true, true, "broadcast (IPv4 in IPv6)"},
		{"ff05::1:3", true, true, "multicast"},
		{"239.255.255.250", true, true, "multicast"},
		// Beside special ranges, public.
		{"2001:200::1", false, false, ""}, // the first APNIC block after 2001::/23
		{"192.0.3.1", false, false, ""},
		{"198.51.101.1", false, false, ""},
		{"203.0.112.1", false, false, ""},
		{"3fff:1000::1", false, false, ""},
		{"2620:4f:8001::1", false, false, ""},
		{"::ffff:10.1.2.3", true, false, "private (IPv4 in IPv6)"},
		{"::ffff:169.254.169.254", true, false, "link-local (cloud metadata) (IPv4 in IPv6)"},
		{"::a9fe:a9fe", true, false, "link-local"},        // v4-compatible 169.254.169.254
		{"64:ff9b::a9fe:a9fe", true, false, "link-local"}, // NAT64 of it
		{"2002:a9fe:a9fe::", true, false, "link-local"},   // 6to4 of it
		{"2002:c0a8:101::1", true, false, "private"},      // 6to4 of 192.168.1.1
	}
	for _, tc := range tests {
		why, hard := classify(netip.MustParseAddr(tc.ip))
		if (why != "") != tc.refused || hard != tc.hard || !strings.Contains(why, tc.contains) {
			t.Errorf("classify(%s) = %q, hard %v; want refused %v (%q), hard %v", tc.ip, why, hard, tc.refused, tc.contains, tc.hard)
		}
	}
}

func TestEgressParseAuthority(t *testing.T) {
	tests := []struct {
		in, def  string
		host     string
		ip       bool
		port     uint16
		wantFail bool
	}{
		{"example.com:443", "", "example.com", false, 443, false},
		{"Example.COM.:80", "", "example.com", false, 80, false},
		{"example.com", "80", "example.com", false, 80, false},
		{"a_b.example-1.io:8080", "", "a_b.example-1.io", false, 8080, false},
		{"xn--bcher-kva.example:443", "", "xn--bcher-kva.example", false, 443, false},
		{"localhost:80", "", "localhost", false, 80, false},
		{"93.184.215.14:443", "", "93.184.215.14", true, 443, false},
		{"[2606:4700::1]:443", "", "2606:4700::1", true, 443, false},
		{"[::ffff:127.0.0.1]:80", "", "::ffff:127.0.0.1", true, 80, false},
		{"[2606:4700::1]", "443", "2606:4700::1", true, 443, false},
		{"example.com", "", "", false, 0, true},       // CONNECT needs a port
		{"example.com:", "80", "", false, 0, true},    // empty port
		{"example.com:0", "", "", false, 0, true},     // port 0
		{"example.com:65536", "", "", false, 0, true}, // too big
		{"example.com:080", "", "", false, 0, true},   // leading zero
		{"example.com:+80", "", "", false, 0, true},
		{"example.com:http", "", "", false, 0, true},
		{"2130706433:80", "", "", false, 0, true}, // 127.0.0.1 in decimal
		{"0x7f000001:80", "", "", false, 0, true}, // in hex
		{"0x7f.1:80", "", "", false, 0, true},
		{"127.1:80", "", "", false, 0, true},
		{"0177.0.0.1:80", "", "", false, 0, true}, // octal
		{"127.000.000.001:80", "", "", false, 0, true},
		{"127.0.0.1.:80", "", "", false, 0, true},
		{"::1:80", "", "", false, 0, true},              // IPv6 without brackets
		{"[::1%lo]:80", "", "", false, 0, true},         // zone
		{"[fe80::1%25eth0]:80", "", "", false, 0, true}, // zone, URL-escaped
		{"[127.0.0.1]:80", "", "", false, 0, true},      // IPv4 in brackets
		{"[::1]x:80", "", "", false, 0, true},
		{"[::1:80", "", "", false, 0, true},
		{"user@example.com:80", "", "", false, 0, true},
		{"exa mple.com:80", "", "", false, 0, true},
		{"-example.com:80", "", "", false, 0, true},
		{"example-.com:80", "", "", false, 0, true},
		{"a..b:80", "", "", false, 0, true},
		{".:80", "", "", false, 0, true},
		{":80", "", "", false, 0, true},
		{"", "80", "", false, 0, true},
		{"ex\u212Aample.com:80", "", "", false, 0, true}, // Kelvin sign lower-cases to k
		{strings.Repeat("a", 64) + ".com:80", "", "", false, 0, true},
	}
	for _, tc := range tests {
		host, ip, port, err := ParseAuthority(tc.in, tc.def)
		if tc.wantFail {
			if err == nil || !errors.Is(err, ErrBadAuthority) {
				t.Errorf("ParseAuthority(%q, %q) = %q, %v, %d, %v; want ErrBadAuthority", tc.in, tc.def, host, ip, port, err)
			}
			continue
		}
		if err != nil || host != tc.host || ip.IsValid() != tc.ip || port != tc.port {
			t.Errorf("ParseAuthority(%q, %q) = %q, %v, %d, %v; want %q, ip %v, %d", tc.in, tc.def, host, ip, port, err, tc.host, tc.ip, tc.port)
		}
	}
}

func TestEgressPolicy(t *testing.T) {
	hostOwn := map[netip.Addr]bool{netip.MustParseAddr("93.184.216.9"): true, netip.MustParseAddr("2606:4700::9"): true}
	tests := []struct {
		name  string
		hosts []string
		dest  string // host as the sandbox names it
		addr  string // the address it resolves to
		ok    bool
	}{
		{"empty list: public name", nil, "example.com", "93.184.215.14", true},
		{"empty list: public literal", nil, "93.184.215.14", "93.184.215.14", true},
		{"empty list: name resolving to a private address", nil, "evil.example", "10.0.0.5", false},
		{"empty list: name resolving to metadata", nil, "evil.example", "169.254.169.254", false},
		{"empty list: the host's own public address", nil, "93.184.216.9", "93.184.216.9", false},
		{"empty list: the host's own address, v4-mapped", nil, "::ffff:93.184.216.9", "::ffff:93.184.216.9", false},
		{"empty list: the host's own IPv6 address", nil, "2606:4700::9", "2606:4700::9", false},
		{"empty list: name resolving to the host", nil, "me.example", "93.184.216.9", false},
		{"empty list: TEST-NET-1", nil, "192.0.2.1", "192.0.2.1", false},
		{"empty list: name resolving to TEST-NET-3", nil, "doc.example", "203.0.113.5", false},
		{"listed TEST-NET-1 prefix", []string{"192.0.2.0/24"}, "192.0.2.1", "192.0.2.1", true},
		{"listed documentation IPv6 address", []string{"2001:db8::5"}, "2001:db8::5", "2001:db8::5", true},
		{"exact name", []string{"api.example.com"}, "api.example.com", "93.184.215.14", true},
		{"exact name: another name", []string{"api.example.com"}, "www.example.com", "93.184.215.14", false},
		{"exact name: not its subdomains", []string{"example.com"}, "a.example.com", "93.184.215.14", false},
		{"wildcard: subdomain", []string{"*.example.com"}, "a.example.com", "93.184.215.14", true},
		{"wildcard: deeper subdomain", []string{"*.example.com"}, "a.b.example.com", "93.184.215.14", true},
		{"wildcard: not the apex", []string{"*.example.com"}, "example.com", "93.184.215.14", false},
		{"wildcard: not a lookalike", []string{"*.example.com"}, "badexample.com", "93.184.215.14", false},
		{"listed name still may not resolve privately", []string{"internal.example"}, "internal.example", "10.0.0.5", false},
		{"listed name resolving into a listed prefix", []string{"internal.example", "10.0.0.0/8"}, "internal.example", "10.0.0.5", true},
		{"listed address", []string{"10.1.2.3"}, "10.1.2.3", "10.1.2.3", true},
		{"listed address, v4-mapped", []string{"10.1.2.3"}, "::ffff:10.1.2.3", "::ffff:10.1.2.3", true},
		{"listed prefix, v4-mapped form", []string{"::ffff:10.0.0.0/104"}, "10.9.9.9", "10.9.9.9", true},
		{"listed host address", []string{"93.184.216.9"}, "93.184.216.9", "93.184.216.9", true},
		{"list without *: public literal", []string{"example.com"}, "93.184.215.14", "93.184.215.14", false},
		{"list without *: unlisted name", []string{"10.0.0.0/8"}, "example.com", "93.184.215.14", false},
		{"star: any public name", []string{"*"}, "example.com", "93.184.215.14", true},
		{"star: no literal", []string{"*"}, "93.184.215.14", "93.184.215.14", false},
		{"listed loopback stays refused", []string{"127.0.0.1"}, "127.0.0.1", "127.0.0.1", false},
		{"listed 0/0 does not open loopback", []string{"0.0.0.0/0"}, "127.0.0.1", "127.0.0.1", false},
		{"listed 0/0 does not open 0.0.0.0", []string{"0.0.0.0/0"}, "0.0.0.0", "0.0.0.0", false},
		{"listed 0/0 opens private", []string{"0.0.0.0/0"}, "10.0.0.1", "10.0.0.1", true},
	}
	for _, tc := range tests {
		p, err := NewPolicy(tc.hosts)
		if err != nil {
			t.Fatalf("%s: NewPolicy(%q): %v", tc.name, tc.hosts, err)
		}
		var host string
		var ip netip.Addr
		if a, perr := netip.ParseAddr(tc.dest); perr == nil {
			host, ip = a.String(), a
		} else {
			host, ip = tc.dest, netip.Addr{}
		}
		err = p.AllowHost(host, ip)
		if err == nil {
			err = p.CheckAddr(netip.MustParseAddr(tc.addr), hostOwn)
		}
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrRefused)) {
			t.Errorf("%s: %q with EgressHosts %q (resolving to %s): %v, want allowed %v", tc.name, tc.dest, tc.hosts, tc.addr, err, tc.ok)
		}
	}
}

// Issue 31, finding 6: the proxy reached the subnets the host is directly
// connected to (its neighbours, its gateway) when their addresses were public.
func TestEgressPolicyHostSubnets(t *testing.T) {
	ifaces := []netip.Prefix{
		netip.MustParsePrefix("93.184.216.9/24"),    // a public address on a /24
		netip.MustParsePrefix("2606:4700::9/64"),    // and its IPv6 subnet
		netip.MustParsePrefix("8.8.4.4/32"),         // a point-to-point address
		netip.MustParsePrefix("::ffff:9.9.9.1/120"), // a v4-mapped form
		netip.MustParsePrefix("127.0.0.1/8"),
	}
	tests := []struct {
		name     string
		hosts    []string
		addr     string
		ok       bool
		contains string
	}{
		{"own address", nil, "93.184.216.9", false, "an address of the host"},
		{"gateway", nil, "93.184.216.1", false, "directly connected to (93.184.216.0/24)"},
		{"neighbour", nil, "93.184.216.77", false, "directly connected"},
		{"subnet broadcast", nil, "93.184.216.255", false, "directly connected"},
		{"neighbour, v4-mapped", nil, "::ffff:93.184.216.77", false, "directly connected"},
		{"neighbour, NAT64", nil, "64:ff9b::5db8:d84d", false, "directly connected"},
		{"IPv6 neighbour", nil, "2606:4700::1", false, "directly connected to (2606:4700::/64)"},
		{"beside the subnet", nil, "93.184.217.1", true, ""},
		{"beside the IPv6 subnet", nil, "2606:4700:0:1::1", true, ""},
		{"point-to-point address", nil, "8.8.4.4", false, "an address of the host"},
		{"beside the point-to-point address", nil, "8.8.4.5", true, ""},
		{"v4-mapped interface subnet", nil, "9.9.9.200", false, "directly connected to (9.9.9.0/24)"},
		{"listed neighbour", []string{"93.184.216.77"}, "93.184.216.77", true, ""},
		{"listed subnet", []string{"93.184.216.0/24"}, "93.184.216.1", true, ""},
		{"listed other neighbour", []string{"93.184.216.77"}, "93.184.216.78", false, "directly connected"},
		{"listed loopback subnet stays refused", []string{"127.0.0.0/8"}, "127.0.0.2", false, "loopback"},
	}
	for _, tc := range tests {
		p, err := NewPolicy(tc.hosts)
		if err != nil {
			t.Fatalf("%s: NewPolicy(%q): %v", tc.name, tc.hosts, err)
		}
		err = p.CheckAddrNets(netip.MustParseAddr(tc.addr), ifaces)
		if (err == nil) != tc.ok || (err != nil && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.contains))) {
			t.Errorf("%s: CheckAddrNets(%s) with EgressHosts %q = %v, want allowed %v (%q)", tc.name, tc.addr, tc.hosts, err, tc.ok, tc.contains)
		}
	}
}

// Some networks answer every name with an address of a documentation range and
// route it out (this one: deb.debian.org is 203.0.113.80). A name EgressHosts
// lists exactly may resolve there; a wildcard, "*" or no list may not, and no
// name opens private ranges, the host's own subnets or loopback.
func TestEgressPolicyResolvedNames(t *testing.T) {
	ifaces := []netip.Prefix{netip.MustParsePrefix("192.0.2.2/24"), netip.MustParsePrefix("127.0.0.1/8")}
	tests := []struct {
		name  string
		hosts []string
		host  string // as the sandbox named it
		addr  string // what the host's resolver gave
		ok    bool
	}{
		{"listed name into TEST-NET-3", []string{"deb.debian.org"}, "deb.debian.org", "203.0.113.80", true},
		{"listed name into benchmarking", []string{"deb.debian.org"}, "deb.debian.org", "198.18.0.9", true},
		{"listed name into IPv6 documentation", []string{"deb.debian.org"}, "deb.debian.org", "2001:db8::80", true},
		{"listed name into a public address", []string{"deb.debian.org"}, "deb.debian.org", "93.184.216.34", true},
		{"wildcard name into TEST-NET-3", []string{"*.debian.org"}, "deb.debian.org", "203.0.113.80", false},
		{"star into TEST-NET-3", []string{"*"}, "deb.debian.org", "203.0.113.80", false},
		{"no list into TEST-NET-3", nil, "deb.debian.org", "203.0.113.80", false},
		{"listed name's literal address", []string{"deb.debian.org"}, "203.0.113.80", "203.0.113.80", false},
		{"literal address, no name", []string{"deb.debian.org"}, "", "203.0.113.80", false},
		{"listed name into private", []string{"deb.debian.org"}, "deb.debian.org", "10.0.0.5", false},
		{"listed name into link-local", []string{"deb.debian.org"}, "deb.debian.org", "169.254.169.254", false},
		{"listed name into the host's TEST-NET-1 subnet", []string{"deb.debian.org"}, "deb.debian.org", "192.0.2.1", false},
		{"listed name into the host's own address", []string{"deb.debian.org"}, "deb.debian.org", "192.0.2.2", false},
		{"listed name into loopback", []string{"deb.debian.org"}, "deb.debian.org", "127.0.0.1", false},
		{"listed name into multicast", []string{"deb.debian.org"}, "deb.debian.org", "224.0.0.1", false},
		{"listed name into Teredo", []string{"deb.debian.org"}, "deb.debian.org", "2001::1", false},
		{"listed prefix opens the host's subnet", []string{"192.0.2.0/24"}, "192.0.2.1", "192.0.2.1", true},
	}
	for _, tc := range tests {
		p, err := NewPolicy(tc.hosts)
		if err != nil {
			t.Fatalf("%s: NewPolicy(%q): %v", tc.name, tc.hosts, err)
		}
		err = p.CheckResolved(tc.host, netip.MustParseAddr(tc.addr), ifaces)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrRefused)) {
			t.Errorf("%s: CheckResolved(%q, %s) with EgressHosts %q = %v, want allowed %v", tc.name, tc.host, tc.addr, tc.hosts, err, tc.ok)
		}
	}
}

// LocalNets lists this namespace's loopback with its prefix.
func TestEgressLocalNets(t *testing.T) {
	nets, err := LocalNets()
	if err != nil {
		t.Fatal(err)
	}
	want := netip.MustParsePrefix("127.0.0.1/8")
	for _, n := range nets {
		if n == want {
			return
		}
	}
	t.Errorf("LocalNets() = %v, want it to hold %v", nets, want)
}

func TestEgressHostsRejected(t *testing.T) {
	for _, h := range []string{"", " ", "exa mple.com", "*.", "*", "**.example.com", "*example.com", "a.*.com", "10.0.0.0/33", "fe80::1%eth0", "http://example.com", "example.com:443", "2130706433"} {
		_, err := NewPolicy([]string{h})
		if h == "*" {
			if err != nil {
				t.Errorf("NewPolicy(%q) = %v, want accepted", h, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("NewPolicy(%q) = nil, want an error", h)
		}
	}
}

// FuzzParseAuthority: whatever a sandbox sends, the parser never panics, and
// what it accepts is canonical: it parses again to itself, an IP literal is
// an address, and a name never parses as an IP address.
func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"example.com:443", "[::1]:80", "127.0.0.1:80", "2130706433:80", "0x7f.1:80",
		"[::ffff:127.0.0.1]:443", "Example.COM.:80", "[fe80::1%25eth0]:80", "a_b:1", "[::1", ":80"} {
		f.Add(s, "")
		f.Add(s, "80")
	}
	f.Fuzz(func(t *testing.T, in, def string) {
		host, ip, port, err := ParseAuthority(in, def)
		if err != nil {
			if !errors.Is(err, ErrBadAuthority) {
				t.Fatalf("ParseAuthority(%q, %q) error %v is not ErrBadAuthority", in, def, err)
			}
			return
		}
		if port == 0 {
			t.Fatalf("ParseAuthority(%q, %q) accepted port 0", in, def)
		}
		if ip.IsValid() {
			if host != ip.String() || ip.Zone() != "" {
				t.Fatalf("ParseAuthority(%q, %q) = %q, %v: not the address's text", in, def, host, ip)
			}
		} else if _, err := netip.ParseAddr(host); err != nil && egresshost.Numeric(host[strings.LastIndexByte(host, '.')+1:]) {
			t.Fatalf("ParseAuthority(%q, %q) = name %q ending in a number", in, def, host)
		} else if err == nil {
			t.Fatalf("ParseAuthority(%q, %q) = name %q that is an address", in, def, host)
		}
		again := host
		if ip.Is6() {
			again = "[" + host + "]"
		}
		again += ":" + strconv.Itoa(int(port))
		h2, ip2, p2, err := ParseAuthority(again, "")
		if err != nil || h2 != host || ip2 != ip || p2 != port {
			t.Fatalf("ParseAuthority(%q) = %q, %v, %d, %v; want %q, %v, %d (from %q)", again, h2, ip2, p2, err, host, ip, port, in)
		}
	})
}

// The proxy lists the host's addresses and checks the policy on every dial.
func BenchmarkEgressDialCheck(b *testing.B) {
	p, err := NewPolicy([]string{"*.example.com", "10.0.0.0/8"})
	if err != nil {
		b.Fatal(err)
	}
	ip := netip.MustParseAddr("93.184.215.14")
	for b.Loop() {
		own, err := LocalNets()
		if err != nil {
			b.Fatal(err)
		}
		if err := p.AllowHost("a.example.com", netip.Addr{}); err != nil {
			b.Fatal(err)
		}
		if err := p.CheckAddrNets(ip, own); err != nil {
			b.Fatal(err)
		}
	}
}
