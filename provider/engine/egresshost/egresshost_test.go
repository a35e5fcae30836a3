package egresshost

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical form; "" = refused
		kind Kind
	}{
		{"*", "*", AnyName},
		{"api.example.com", "api.example.com", Name},
		{"API.Example.COM.", "api.example.com", Name},
		{"under_score.example", "under_score.example", Name},
		{"*.npmjs.org", "*.npmjs.org", Suffix},
		{"*.NPMJS.org.", "*.npmjs.org", Suffix},
		{"10.1.2.3", "10.1.2.3/32", Prefix},
		{"::1", "::1/128", Prefix},
		{"::ffff:10.1.2.3", "10.1.2.3/32", Prefix},
		{"192.168.7.9/16", "192.168.0.0/16", Prefix},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8", Prefix},
		{"2001:db8::/32", "2001:db8::/32", Prefix},

		{"", "", 0},
		{"*.", "", 0},
		{"*.*", "", 0},
		{"**.example.com", "", 0},
		{"a.*.example.com", "", 0},
		{"127.1", "", 0},
		{"0x7f.1", "", 0},
		{"2130706433", "", 0},
		{"example.123", "", 0},
		{"-bad.example", "", 0},
		{"bad-.example", "", 0},
		{"a..b", "", 0},
		{"https://example.com", "", 0},
		{"example.com:443", "", 0},
		{"fe80::1%eth0", "", 0},
		{"10.0.0.0/33", "", 0},
		{strings.Repeat("a", 64) + ".example", "", 0},
		{strings.Repeat("a.", 127) + "com", "", 0},
	}
	for _, tt := range tests {
		e, err := Parse(tt.in)
		if tt.want == "" {
			if err == nil || !errors.Is(err, ErrBadEntry) || !strings.Contains(err.Error(), tt.in) {
				t.Errorf("Parse(%q) = %v, %v; want ErrBadEntry naming it", tt.in, e, err)
			}
			continue
		}
		if err != nil || e.String() != tt.want || e.Kind != tt.kind {
			t.Errorf("Parse(%q) = %v (kind %d), %v; want %q (kind %d)", tt.in, e, e.Kind, err, tt.want, tt.kind)
		}
	}
}

// FuzzParse: whatever the entry, an accepted one is canonical (parsing its form gives
// it back), a name never reads as an address, and a prefix is masked.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*", "*.example.com", "Example.COM.", "10.0.0.1", "::ffff:1.2.3.4/120", "0x7f.1", "a_b.c-d.e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("Parse(%q) error %v is not ErrBadEntry", s, err)
			}
			return
		}
		again, err := Parse(e.String())
		if err != nil || again != e {
			t.Fatalf("Parse(%q) = %v; Parse of its form %q = %v, %v", s, e, e.String(), again, err)
		}
		switch e.Kind {
		case Name, Suffix:
			if _, err := netip.ParseAddr(e.Name); err == nil {
				t.Fatalf("Parse(%q) gave the address %q as a name", s, e.Name)
			}
			labels := strings.Split(e.Name, ".")
			if Numeric(labels[len(labels)-1]) || e.Name != strings.ToLower(e.Name) {
				t.Fatalf("Parse(%q) = name %q: numeric last label or not lower case", s, e.Name)
			}
		case Prefix:
			if e.Prefix.Masked() != e.Prefix || e.Prefix.Addr().Is4In6() || e.Prefix.Addr().Zone() != "" {
				t.Fatalf("Parse(%q) = prefix %v: not masked or not canonical", s, e.Prefix)
			}
		}
	})
}
