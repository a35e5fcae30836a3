// Package egresshost is the grammar of engine.Spec.EgressHosts, the one place every
// engine and protocol server parses an entry: "*" (any host name), "*.example.com"
// (any name below example.com), a host name, an IP address or a CIDR prefix. Parsing
// is strict and canonical, so what one side accepts the other does, and no spelling
// of an IPv4 address (2130706433, 0x7f.1, 127.1) passes as a name.
package egresshost

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Kind says what an entry allows.
type Kind int

const (
	// AnyName is "*": any host name (not any IP literal).
	AnyName Kind = iota
	// Name is one host name.
	Name
	// Suffix is "*.example.com": any name below example.com.
	Suffix
	// Prefix is an IP address (a prefix of its full length) or a CIDR prefix.
	Prefix
)

// ErrBadEntry marks an entry in none of the forms.
var ErrBadEntry = errors.New("not a host name, *.suffix, *, IP address or CIDR prefix")

// Entry is one parsed entry.
type Entry struct {
	Kind Kind
	// Name is the canonical host name (Name) or the suffix without "*." (Suffix).
	Name string
	// Prefix is the masked prefix (Prefix); IPv4 in IPv6 is written as IPv4.
	Prefix netip.Prefix
}

// String is the entry's canonical form.
func (e Entry) String() string {
	switch e.Kind {
	case AnyName:
		return "*"
	case Suffix:
		return "*." + e.Name
	case Prefix:
		return e.Prefix.String()
	}
	return e.Name
}

// Parse parses one entry; an error names it and wraps ErrBadEntry.
func Parse(s string) (Entry, error) {
	switch {
	case s == "*":
		return Entry{Kind: AnyName}, nil
	case strings.HasPrefix(s, "*."):
		if name, ok := HostName(s[2:]); ok {
			return Entry{Kind: Suffix, Name: name}, nil
		}
	case strings.Contains(s, "/"):
		if p, err := netip.ParsePrefix(s); err == nil {
			if p.Addr().Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			return Entry{Kind: Prefix, Prefix: p.Masked()}, nil
		}
	default:
		if ip, err := netip.ParseAddr(s); err == nil {
			if ip.Zone() == "" {
				ip = ip.Unmap()
				return Entry{Kind: Prefix, Prefix: netip.PrefixFrom(ip, ip.BitLen())}, nil
			}
			break
		}
		if name, ok := HostName(s); ok {
			return Entry{Kind: Name, Name: name}, nil
		}
	}
	return Entry{}, fmt.Errorf("egress host %q: %w", s, ErrBadEntry)
}

// HostName returns s as a canonical DNS host name (lower case, without a trailing
// dot), or false: labels of 1–63 letters, digits, '-' and '_', not starting or ending
// with '-', 253 bytes at most, and a last label that is not a number (decimal or
// 0x…), so no spelling of an IPv4 address passes.
func HostName(s string) (string, bool) {
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
	if Numeric(labels[len(labels)-1]) {
		return "", false
	}
	return string(b), true
}

// Numeric reports whether label l reads as a number in some inet_aton spelling
// (decimal, or 0x and hex digits).
func Numeric(l string) bool {
	if hex, ok := strings.CutPrefix(l, "0x"); ok {
		for _, c := range hex {
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
