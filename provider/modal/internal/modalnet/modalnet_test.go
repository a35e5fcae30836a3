package modalnet

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine/egresshost"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name           string
		hosts          []string
		cidrs, domains []string
		bad            string // the entry the error names; "" for success
	}{
		{"none", nil, []string{}, []string{}, ""},
		{"names", []string{"registry.npmjs.org", "API.Linear.App.", "*.example.com", "*"},
			[]string{}, []string{"registry.npmjs.org", "api.linear.app", "*.example.com", "*"}, ""},
		{"addresses", []string{"203.0.113.7", "2001:db8::1", "::ffff:198.51.100.1", "10.1.2.3/8", "2001:db8:1::/48", "::ffff:192.0.2.0/120"},
			[]string{"203.0.113.7/32", "2001:db8::1/128", "198.51.100.1/32", "10.0.0.0/8", "2001:db8:1::/48", "192.0.2.0/24"}, []string{}, ""},
		{"mixed", []string{"api.example.com", "192.0.2.1"}, []string{"192.0.2.1/32"}, []string{"api.example.com"}, ""},
		{"underscore label", []string{"_dmarc.example.com"}, []string{}, []string{"_dmarc.example.com"}, ""},
		{"empty", []string{""}, nil, nil, ""},
		{"zone", []string{"fe80::1%eth0"}, nil, nil, "fe80::1%eth0"},
		{"bad prefix length", []string{"192.0.2.0/33"}, nil, nil, "192.0.2.0/33"},
		{"decimal address", []string{"2130706433"}, nil, nil, "2130706433"},
		{"short address", []string{"127.1"}, nil, nil, "127.1"},
		{"hex address", []string{"0x7f.1"}, nil, nil, "0x7f.1"},
		{"octal address", []string{"0177.0.0.1"}, nil, nil, "0177.0.0.1"},
		{"wildcard in the middle", []string{"api.*.com"}, nil, nil, "api.*.com"},
		{"bare wildcard suffix", []string{"*."}, nil, nil, "*."},
		{"double wildcard", []string{"*.*.example.com"}, nil, nil, "*.*.example.com"},
		{"url", []string{"https://example.com"}, nil, nil, "https://example.com"},
		{"with port", []string{"example.com:443"}, nil, nil, "example.com:443"},
		{"leading hyphen", []string{"-a.example.com"}, nil, nil, "-a.example.com"},
		{"empty label", []string{"a..example.com"}, nil, nil, "a..example.com"},
		{"long label", []string{strings.Repeat("a", 64) + ".com"}, nil, nil, strings.Repeat("a", 64) + ".com"},
		{"space", []string{"exa mple.com"}, nil, nil, "exa mple.com"},
		{"bad after good", []string{"ok.example.com", "no/pe"}, nil, nil, "no/pe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cidrs, domains, err := Split(tc.hosts)
			if tc.bad != "" || tc.cidrs == nil {
				if err == nil || !errors.Is(err, ErrBadEntry) || (tc.bad != "" && !strings.Contains(err.Error(), tc.bad)) {
					t.Fatalf("Split(%q) = %q, %q, %v; want an ErrBadEntry naming %q", tc.hosts, cidrs, domains, err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatalf("Split(%q): %v", tc.hosts, err)
			}
			if d := cmp.Diff(tc.cidrs, cidrs); d != "" {
				t.Errorf("Split(%q) cidrs (-want +got):\n%s", tc.hosts, d)
			}
			if d := cmp.Diff(tc.domains, domains); d != "" {
				t.Errorf("Split(%q) domains (-want +got):\n%s", tc.hosts, d)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cidrs, domains []string
		want           []string
		bad            string
	}{
		{"none", nil, nil, []string{}, ""},
		{"both", []string{"198.51.100.0/24", "2001:db8::7"}, []string{"Example.COM", "*.svc.example"},
			[]string{"198.51.100.0/24", "2001:db8::7/128", "example.com", "*.svc.example"}, ""},
		{"a name among the CIDRs", []string{"example.com"}, nil, nil, "example.com"},
		{"an address among the domains", nil, []string{"192.0.2.1"}, nil, "192.0.2.1"},
		{"a bad domain", nil, []string{"*.*"}, nil, "*.*"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Join(tc.cidrs, tc.domains)
			if tc.bad != "" {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("Join(%q, %q) = %q, %v; want an error naming %q", tc.cidrs, tc.domains, got, err, tc.bad)
				}
				return
			}
			if err != nil {
				t.Fatalf("Join(%q, %q): %v", tc.cidrs, tc.domains, err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Join(%q, %q) (-want +got):\n%s", tc.cidrs, tc.domains, d)
			}
		})
	}
}

// FuzzSplit: an entry Split accepts lands in exactly one list, canonical (parsing it
// again gives it back), and Join of the two lists accepts them; an address entry is
// a prefix that contains the address.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"registry.npmjs.org", "*.example.com", "*", "192.0.2.1", "10.0.0.0/8", "::ffff:1.2.3.4",
		"2001:db8::/32", "fe80::1%lo", "127.1", "0x7f.1", "a..b", "*.", "EXAMPLE.com.", "1.2.3.4/99"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cidrs, domains, err := Split([]string{s})
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("Split(%q) error %v is not ErrBadEntry", s, err)
			}
			return
		}
		if len(cidrs)+len(domains) != 1 {
			t.Fatalf("Split(%q) = %q, %q; want one entry in one list", s, cidrs, domains)
		}
		for _, c := range cidrs {
			p, err := netip.ParsePrefix(c)
			if err != nil || p.String() != c || p.Masked() != p {
				t.Fatalf("Split(%q) CIDR %q is not a canonical prefix (%v)", s, c, err)
			}
			if ip, err := netip.ParseAddr(s); err == nil && !p.Contains(ip.Unmap()) {
				t.Fatalf("Split(%q) = %q, which does not contain the address", s, c)
			}
		}
		for _, d := range domains {
			if again, err := egresshost.Parse(d); err != nil || again.String() != d {
				t.Fatalf("egresshost.Parse(%q) = %v, %v; want it unchanged (from Split(%q))", d, again, err, s)
			}
			if _, err := netip.ParseAddr(strings.TrimPrefix(d, "*.")); err == nil {
				t.Fatalf("Split(%q) gave the address %q as a domain", s, d)
			}
		}
		if hosts, err := Join(cidrs, domains); err != nil || len(hosts) != 1 {
			t.Fatalf("Join(%q, %q) = %q, %v; want Split's entry back", cidrs, domains, hosts, err)
		}
	})
}

// FuzzJoin: the local server's parse of an SDK's two lists (untrusted input). What
// Join accepts comes out canonical, each entry sorted back into the list it came
// from by Split; an address never passes as a domain, nor a name as a CIDR.
func FuzzJoin(f *testing.F) {
	for _, s := range [][2]string{{"10.0.0.0/8", "example.com"}, {"192.0.2.1", "*.example.com"}, {"example.com", ""},
		{"", "192.0.2.1"}, {"::ffff:1.2.3.4/128", "*"}, {"fe80::1%eth0", "A.B."}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, cidr, domain string) {
		hosts, err := Join([]string{cidr}, []string{domain})
		if err != nil {
			return
		}
		cidrs, domains, err := Split(hosts)
		if err != nil || len(cidrs) != 1 || len(domains) != 1 || cidrs[0] != hosts[0] || domains[0] != hosts[1] {
			t.Fatalf("Split(Join(%q, %q) = %q) = %q, %q, %v; want the same entries in the same lists", cidr, domain, hosts, cidrs, domains, err)
		}
	})
}
