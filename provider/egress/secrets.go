package egress

// Secrets by substitution. Inside the sandbox a secret's variable holds a placeholder:
// random, unique per sandbox and secret, and shaped like the value (the same key
// prefix, such as "sk-ant-api03-" or "ghp_", the same length and alphabet) so that
// SDKs which check a key's shape accept it. The proxy puts the value in the
// placeholder's place on requests to the secret's hosts only, refuses a request that
// carries a placeholder anywhere else, and scrubs the value from responses.
//
// The placeholder has the value's length on purpose: scrubbing a response then keeps
// its length, so a Content-Length stays true and a body can be scrubbed as it streams.
//
// For HTTPS to a secret's host the proxy terminates TLS with a leaf of the sandbox's
// own certificate authority. The CA's key is made here, lives only in this process's
// memory, and is name-constrained to the secrets' hosts, so even a leaked key could
// not vouch for any other host.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/egresshost"
)

// ErrBadSecret marks a Spec.Secrets entry NewSecrets refuses; the error names the
// field.
var ErrBadSecret = errors.New("bad secret")

// Limits of a secret's value.
const (
	// MinSecretLen is the shortest value accepted: the placeholder has the value's
	// length, and a shorter one would be guessable, and scrubbing a short value
	// from responses would mangle them.
	MinSecretLen = 12
	// MaxSecretLen is the longest value accepted.
	MaxSecretLen = 8192
	// CAValidity is how long a sandbox's certificate authority (and its leaves) is
	// valid; the authority lives no longer than the proxy process that holds its key.
	CAValidity = 7 * 24 * time.Hour
)

// Secrets is the host side of a sandbox's Spec.Secrets: each secret's placeholder,
// which the sandbox's environment holds, and the value the proxy puts in its place on
// requests to the secret's hosts. It also holds the sandbox's own certificate
// authority, whose certificate (TrustPEM) the sandbox trusts and whose key never
// leaves the host, for the hosts whose TLS the proxy terminates to make the swap.
//
// The zero of a sandbox without secrets is nil; every method accepts a nil receiver.
type Secrets struct {
	list []secret

	caCert  *x509.Certificate
	caKey   *ecdsa.PrivateKey
	caPEM   []byte
	leafKey *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

type secret struct {
	name, value, placeholder string
	hosts                    []egresshost.Entry
}

// NewSecrets validates list and makes a placeholder for each secret; nil for an empty
// list. A refused entry's error names its field and wraps ErrBadSecret: a name that
// is not an environment variable name, or repeated; a host with a scheme or a port,
// or one that is not a host name, "*.suffix" or an IP address; a value that is
// empty, shorter than MinSecretLen, not printable ASCII, or contains its own
// placeholder.
func NewSecrets(list []engine.Secret) (*Secrets, error) {
	if len(list) == 0 {
		return nil, nil
	}
	s := &Secrets{leaves: map[string]*tls.Certificate{}}
	seen := map[string]bool{}
	for i, e := range list {
		sec, err := newSecret(e)
		if err != nil {
			return nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		if seen[sec.name] {
			return nil, fmt.Errorf("secrets[%d].name %q: given twice: %w", i, sec.name, ErrBadSecret)
		}
		seen[sec.name] = true
		s.list = append(s.list, sec)
	}
	if err := s.newCA(time.Now()); err != nil {
		return nil, fmt.Errorf("make the sandbox's certificate authority: %w", err)
	}
	return s, nil
}

func newSecret(e engine.Secret) (secret, error) {
	bad := func(field, v, why string) (secret, error) {
		return secret{}, fmt.Errorf("%s %q: %s: %w", field, v, why, ErrBadSecret)
	}
	if !IsEnvName(e.Name) {
		return bad("name", e.Name, "not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
	}
	sec := secret{name: e.Name, value: e.Value}
	if len(e.Hosts) == 0 {
		return bad("hosts of", e.Name, "no host: name the hosts the value may be sent to")
	}
	for j, h := range e.Hosts {
		field := fmt.Sprintf("hosts[%d]", j)
		if strings.Contains(h, "://") {
			return bad(field, h, "has a scheme; give the bare host name")
		}
		if strings.Contains(strings.Trim(h, "[]"), "/") {
			return bad(field, h, "has a path or prefix; give one host name")
		}
		if strings.HasPrefix(h, "[") || (strings.Count(h, ":") == 1) {
			return bad(field, h, "has a port or brackets; give the bare host name")
		}
		en, err := egresshost.Parse(h)
		if err != nil {
			return bad(field, h, "not a host name, *.suffix or IP address")
		}
		if en.Kind == egresshost.AnyName {
			return bad(field, h, "would send the value to any host")
		}
		sec.hosts = append(sec.hosts, en)
	}
	// The value itself is never quoted in an error.
	switch {
	case e.Value == "":
		return bad("value of", e.Name, "empty")
	case len(e.Value) < MinSecretLen:
		return bad("value of", e.Name, fmt.Sprintf("shorter than %d characters", MinSecretLen))
	case len(e.Value) > MaxSecretLen:
		return bad("value of", e.Name, fmt.Sprintf("longer than %d characters", MaxSecretLen))
	}
	for i := 0; i < len(e.Value); i++ {
		if c := e.Value[i]; c < 0x20 || c > 0x7e {
			return bad("value of", e.Name, "not printable ASCII (it goes into HTTP headers)")
		}
	}
	ph, err := Placeholder(e.Value)
	if err != nil {
		return secret{}, err
	}
	if strings.Contains(e.Value, ph) || strings.Contains(ph, e.Value) {
		return bad("value of", e.Name, "contains its own placeholder")
	}
	sec.placeholder = ph
	return sec, nil
}

// IsEnvName reports whether s is an environment variable name.
func IsEnvName(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || (i > 0 && c >= '0' && c <= '9') {
			continue
		}
		return false
	}
	return true
}

const (
	alphaLowerHex = "0123456789abcdef"
	alphaUpperHex = "0123456789ABCDEF"
	alphaDigits   = "0123456789"
	alphaAlnum    = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	alphaURL      = alphaAlnum + "-_"
)

// Placeholder is a random stand-in for value: its key prefix (KeyPrefix), then random
// characters of the alphabet the rest of value is written in (hex, digits,
// alphanumerics, or URL-safe base64), to value's length.
func Placeholder(value string) (string, error) {
	prefix := KeyPrefix(value)
	rest := value[len(prefix):]
	alpha := alphabetOf(rest)
	b := make([]byte, len(rest))
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make a placeholder: %w", err)
	}
	// Rejection sampling keeps every character equally likely.
	limit := 256 - 256%len(alpha)
	for i := range b {
		for int(b[i]) >= limit {
			var one [1]byte
			if _, err := rand.Read(one[:]); err != nil {
				return "", fmt.Errorf("make a placeholder: %w", err)
			}
			b[i] = one[0]
		}
		b[i] = alpha[int(b[i])%len(alpha)]
	}
	return prefix + string(b), nil
}

// KeyPrefix is the vendor prefix of an API key that a placeholder keeps ("sk-ant-api03-",
// "sk-proj-", "ghp_", "github_pat_", "xoxb-"): leading short alphanumeric segments
// that each end in '-' or '_', at most 16 characters, leaving at least MinSecretLen
// characters after it. Anything else ("" for a UUID or a plain token) is not kept,
// so a placeholder never repeats a real part of a value.
func KeyPrefix(value string) string {
	end := 0
	for i := 0; i < len(value) && i < 17; i++ {
		c := value[i]
		if c != '-' && c != '_' {
			continue
		}
		seg := value[end:i]
		if seg == "" || len(seg) > 6 || !isAlnum(seg) || len(value)-(i+1) < MinSecretLen {
			break
		}
		end = i + 1
	}
	return value[:end]
}

func isAlnum(s string) bool {
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(alphaAlnum, rune(s[i])) {
			return false
		}
	}
	return true
}

func alphabetOf(s string) string {
	for _, a := range []string{alphaDigits, alphaLowerHex, alphaUpperHex, alphaAlnum, alphaURL} {
		if strings.Trim(s, a) == "" {
			return a
		}
	}
	return alphaAlnum
}

// Env is NAME=placeholder for each secret: what the sandbox's environment gets.
func (s *Secrets) Env() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.list))
	for _, e := range s.list {
		out = append(out, e.name+"="+e.placeholder)
	}
	return out
}

// Hosts are the secrets' hosts, which are allowed egress for the sandbox.
func (s *Secrets) Hosts() []string {
	if s == nil {
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for _, e := range s.list {
		for _, h := range e.hosts {
			if k := h.String(); !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// TrustPEM is the certificate of the sandbox's own authority, to add to the sandbox's
// trust (its system bundle and the variables rules.TrustEnv names); nil without
// secrets.
func (s *Secrets) TrustPEM() []byte {
	if s == nil {
		return nil
	}
	return append([]byte(nil), s.caPEM...)
}

// Carries reports whether host (canonical, as ParseAuthority returns it) is a host of
// at least one secret: the proxy terminates TLS to it and scrubs its responses.
func (s *Secrets) Carries(host string) bool {
	if s == nil {
		return false
	}
	for i := range s.list {
		if s.list[i].allows(host) {
			return true
		}
	}
	return false
}

func (e *secret) allows(host string) bool {
	for _, h := range e.hosts {
		switch h.Kind {
		case egresshost.Name:
			if host == h.Name {
				return true
			}
		case egresshost.Suffix:
			if strings.HasSuffix(host, "."+h.Name) {
				return true
			}
		case egresshost.Prefix:
			if ip, err := netip.ParseAddr(host); err == nil && h.Prefix.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return false
}

func (s *Secrets) newCA(now time.Time) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := serialNumber()
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sandbox egress CA " + serial.Text(16)[:8], Organization: []string{"sandbox-mcp"}},
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	// Name constraints: the authority can vouch for the secrets' hosts only.
	tmpl.PermittedDNSDomainsCritical = true
	for _, e := range s.list {
		for _, h := range e.hosts {
			switch h.Kind {
			case egresshost.Name, egresshost.Suffix:
				tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, h.Name)
			case egresshost.Prefix:
				tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, prefixNet(h.Prefix))
			}
		}
	}
	if len(tmpl.PermittedIPRanges) == 0 {
		tmpl.ExcludedIPRanges = append(tmpl.ExcludedIPRanges,
			prefixNet(netip.MustParsePrefix("0.0.0.0/0")), prefixNet(netip.MustParsePrefix("::/0")))
	}
	if len(tmpl.PermittedDNSDomains) == 0 {
		// No host names: permit only the reserved "invalid" (RFC 6761), as an empty
		// list would permit every name.
		tmpl.PermittedDNSDomains = []string{"invalid"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return err
	}
	s.caCert, s.caKey, s.leafKey = cert, key, leafKey
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// leaf is the certificate the proxy shows the sandbox for host, made once per host.
func (s *Secrets) leaf(host string) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.leaves[host]; c != nil {
		return c, nil
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    s.caCert.NotBefore,
		NotAfter:     s.caCert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.caCert, &s.leafKey.PublicKey, s.caKey)
	if err != nil {
		return nil, fmt.Errorf("sign a certificate for %s: %w", host, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, s.caCert.Raw}, PrivateKey: s.leafKey}
	if c.Leaf, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	s.leaves[host] = c
	return c, nil
}
