package egress

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

const (
	testValue = "sk-ant-api03-REALVALUE0123456789abcdefXYZ"
	testHost  = "api.secret.test"
)

func testSecrets(t testing.TB, list ...engine.Secret) *Secrets {
	t.Helper()
	if len(list) == 0 {
		list = []engine.Secret{{Name: "N4_KEY", Value: testValue, Hosts: []string{testHost}}}
	}
	s, err := NewSecrets(list)
	if err != nil {
		t.Fatalf("NewSecrets: %v", err)
	}
	return s
}

func TestSecretsRefused(t *testing.T) {
	ok := engine.Secret{Name: "KEY", Value: testValue, Hosts: []string{"api.example.com"}}
	with := func(f func(*engine.Secret)) []engine.Secret {
		s := ok
		s.Hosts = append([]string(nil), ok.Hosts...)
		f(&s)
		return []engine.Secret{s}
	}
	tests := []struct {
		name  string
		list  []engine.Secret
		field string
	}{
		{"name with dash", with(func(s *engine.Secret) { s.Name = "MY-KEY" }), "name"},
		{"name with digit first", with(func(s *engine.Secret) { s.Name = "1KEY" }), "name"},
		{"empty name", with(func(s *engine.Secret) { s.Name = "" }), "name"},
		{"name with =", with(func(s *engine.Secret) { s.Name = "A=B" }), "name"},
		{"scheme", with(func(s *engine.Secret) { s.Hosts = []string{"https://api.example.com"} }), "hosts[0]"},
		{"port", with(func(s *engine.Secret) { s.Hosts = []string{"api.example.com:443"} }), "hosts[0]"},
		{"path", with(func(s *engine.Secret) { s.Hosts = []string{"api.example.com/v1"} }), "hosts[0]"},
		{"bracketed ipv6", with(func(s *engine.Secret) { s.Hosts = []string{"[2001:db8::1]"} }), "hosts[0]"},
		{"any host", with(func(s *engine.Secret) { s.Hosts = []string{"*"} }), "hosts[0]"},
		{"cidr", with(func(s *engine.Secret) { s.Hosts = []string{"10.0.0.0/8"} }), "hosts[0]"},
		{"second host bad", with(func(s *engine.Secret) { s.Hosts = append(s.Hosts, "a b") }), "hosts[1]"},
		{"no hosts", with(func(s *engine.Secret) { s.Hosts = nil }), "hosts of"},
		{"empty value", with(func(s *engine.Secret) { s.Value = "" }), "value of"},
		{"short value", with(func(s *engine.Secret) { s.Value = "abc" }), "value of"},
		{"newline in value", with(func(s *engine.Secret) { s.Value = testValue + "\r\nX-Evil: 1" }), "value of"},
		{"non-ascii value", with(func(s *engine.Secret) { s.Value = testValue + "é" }), "value of"},
		{"twice", append(with(func(*engine.Secret) {}), ok), "secrets[1].name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewSecrets(tt.list)
			if !errors.Is(err, ErrBadSecret) {
				t.Fatalf("NewSecrets = %v, want ErrBadSecret", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("NewSecrets = %q, want the field %q named", err, tt.field)
			}
			if strings.Contains(err.Error(), testValue) {
				t.Errorf("NewSecrets error %q quotes the value", err)
			}
		})
	}
}

func TestSecretsAccepted(t *testing.T) {
	s := testSecrets(t,
		engine.Secret{Name: "A", Value: testValue, Hosts: []string{"api.example.com", "*.example.org"}},
		engine.Secret{Name: "B_2", Value: "ghp_0123456789abcdefABCDEF0123456789abcd", Hosts: []string{"api.example.com", "203.0.113.9", "2001:db8::1"}})
	if got, want := strings.Join(s.Hosts(), " "), "api.example.com *.example.org 203.0.113.9/32 2001:db8::1/128"; got != want {
		t.Errorf("Hosts() = %q, want %q", got, want)
	}
	env := s.Env()
	if len(env) != 2 || !strings.HasPrefix(env[0], "A=sk-ant-api03-") || !strings.HasPrefix(env[1], "B_2=ghp_") {
		t.Errorf("Env() = %q, want A=sk-ant-api03-… and B_2=ghp_…", env)
	}
	for host, want := range map[string]bool{"api.example.com": true, "x.example.org": true, "example.org": false,
		"203.0.113.9": true, "2001:db8::1": true, "other.com": false, "api.example.com.evil": false} {
		if got := s.Carries(host); got != want {
			t.Errorf("Carries(%q) = %v, want %v", host, got, want)
		}
	}
	var nilS *Secrets
	if nilS.Env() != nil || nilS.Hosts() != nil || nilS.TrustPEM() != nil || nilS.Carries("x") {
		t.Error("a nil *Secrets is not empty")
	}
	if s, err := NewSecrets(nil); s != nil || err != nil {
		t.Errorf("NewSecrets(nil) = %v, %v, want nil, nil", s, err)
	}
}

func TestKeyPrefix(t *testing.T) {
	tests := []struct{ value, want string }{
		{"sk-ant-api03-abcdefghijklmnopqrstuvwxyz", "sk-ant-api03-"},
		{"sk-proj-abcdefghijklmnopqrstuvwxyz", "sk-proj-"},
		{"sk-abcdefghijklmnopqrstuvwxyz", "sk-"},
		{"ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_"},
		{"github_pat_11ABCDEFG0123456789_abcdefghijk", "github_pat_"},
		{"lin_api_abcdefghijklmnopqrstuvwxyz", "lin_api_"},
		{"xoxb-123456789012-123456789012-abcdefghijkl", "xoxb-"},
		{"123e4567-e89b-12d3-a456-426614174000", ""},
		{"plainlongtokenwithoutanyseparator", ""},
		{"sk-short", ""},
		{"-leading-dash-abcdefghijklmnop", ""},
		{"a-b-c-d-e-f-g-h-i-j-abcdefghijklmnop", "a-b-c-d-e-f-g-h-"},
	}
	for _, tt := range tests {
		if got := KeyPrefix(tt.value); got != tt.want {
			t.Errorf("KeyPrefix(%q) = %q, want %q", tt.value, got, tt.want)
		}
	}
}

func TestPlaceholderShape(t *testing.T) {
	tests := []struct{ value, alphabet string }{
		{"sk-ant-api03-" + strings.Repeat("aB3_-", 20), alphaURL},
		{"ghp_" + strings.Repeat("aB3", 12), alphaAlnum},
		{strings.Repeat("0a1b2c3d", 5), alphaLowerHex},
		{strings.Repeat("0A1B2C3D", 5), alphaUpperHex},
		{strings.Repeat("0123", 5), alphaDigits},
		{"AKIAIOSFODNN7EXAMPLE/abc+def=", alphaAlnum},
	}
	for _, tt := range tests {
		a, err := Placeholder(tt.value)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Placeholder(tt.value)
		prefix := KeyPrefix(tt.value)
		if len(a) != len(tt.value) || !strings.HasPrefix(a, prefix) || strings.Trim(a[len(prefix):], tt.alphabet) != "" {
			t.Errorf("Placeholder(%q) = %q, want %d characters, prefix %q, then of %q", tt.value, a, len(tt.value), prefix, tt.alphabet)
		}
		if a == b || a == tt.value {
			t.Errorf("Placeholder(%q) = %q twice or the value itself", tt.value, a)
		}
	}
}

func TestSecretsCA(t *testing.T) {
	s := testSecrets(t, engine.Secret{Name: "A", Value: testValue, Hosts: []string{testHost, "*.example.org"}})
	block, _ := pem.Decode(s.TrustPEM())
	if block == nil {
		t.Fatal("TrustPEM is not PEM")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.NotAfter.Sub(ca.NotBefore) > CAValidity+time.Hour {
		t.Errorf("CA: IsCA %v, valid %v; want a CA valid at most %v", ca.IsCA, ca.NotAfter.Sub(ca.NotBefore), CAValidity)
	}
	if bytes.Contains(s.TrustPEM(), []byte("PRIVATE")) {
		t.Error("TrustPEM holds a private key")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for host, want := range map[string]bool{testHost: true, "a.example.org": true, "evil.test": false} {
		leaf, err := s.leaf(host)
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := s.leaf(host); again != leaf {
			t.Errorf("leaf(%q) is not cached", host)
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots})
		if (err == nil) != want {
			t.Errorf("verify a leaf for %q: %v, want ok=%v (the CA is constrained to the secrets' hosts)", host, err, want)
		}
	}
}

func TestSwapRequest(t *testing.T) {
	s := testSecrets(t,
		engine.Secret{Name: "A", Value: testValue, Hosts: []string{testHost}},
		engine.Secret{Name: "B", Value: "ghp_0123456789abcdefABCDEF01234/+=", Hosts: []string{"git.test"}})
	pa, pb := s.list[0].placeholder, s.list[1].placeholder
	basic := func(u, p string) string {
		r, _ := http.NewRequest("GET", "http://x/", nil)
		r.SetBasicAuth(u, p)
		return r.Header.Get("Authorization")
	}
	tests := []struct {
		name, host, url string
		header          http.Header
		wantErr         bool
		wantURL         string
		wantHeader      http.Header
		n               int
	}{
		{name: "bearer", host: testHost, url: "http://api.secret.test/v1",
			header: http.Header{"Authorization": {"Bearer " + pa}}, wantURL: "http://api.secret.test/v1",
			wantHeader: http.Header{"Authorization": {"Bearer " + testValue}}, n: 1},
		{name: "x-api-key and any header", host: testHost, url: "http://api.secret.test/",
			header:  http.Header{"X-Api-Key": {pa}, "X-Other": {"a", "b" + pa + "c"}},
			wantURL: "http://api.secret.test/", wantHeader: http.Header{"X-Api-Key": {testValue}, "X-Other": {"a", "b" + testValue + "c"}}, n: 2},
		{name: "query escaped", host: "git.test", url: "http://git.test/x?key=" + pb + "&a=1",
			wantURL: "http://git.test/x?key=" + url.QueryEscape(s.list[1].value) + "&a=1", wantHeader: http.Header{}, n: 1},
		{name: "path", host: "git.test", url: "http://git.test/bot" + pb + "/send",
			wantURL: "http://git.test/bot" + url.PathEscape(s.list[1].value) + "/send", wantHeader: http.Header{}, n: 1},
		{name: "basic auth", host: "git.test", url: "http://git.test/",
			header: http.Header{"Authorization": {basic("x-access-token", pb)}}, wantURL: "http://git.test/",
			wantHeader: http.Header{"Authorization": {basic("x-access-token", s.list[1].value)}}, n: 1},
		{name: "user info", host: testHost, url: "http://u:" + pa + "@api.secret.test/", wantURL: "http://u:" + url.QueryEscape(testValue) + "@api.secret.test/",
			wantHeader: http.Header{}, n: 1},
		{name: "other host header", host: "evil.test", url: "http://evil.test/",
			header: http.Header{"X-Leak": {pa}}, wantErr: true},
		{name: "other secret's host", host: testHost, url: "http://api.secret.test/",
			header: http.Header{"Authorization": {"token " + pb}}, wantErr: true},
		{name: "other host query", host: "evil.test", url: "http://evil.test/?q=" + pa, wantErr: true},
		{name: "other host path", host: "evil.test", url: "http://evil.test/" + pa, wantErr: true},
		{name: "other host basic", host: "evil.test", url: "http://evil.test/",
			header: http.Header{"Authorization": {basic("u", pb)}}, wantErr: true},
		{name: "other host without placeholder", host: "evil.test", url: "http://evil.test/?q=1",
			header: http.Header{"X": {"y"}}, wantURL: "http://evil.test/?q=1", wantHeader: http.Header{"X": {"y"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest("GET", tt.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				r.Header[k] = append([]string(nil), v...)
			}
			n, err := s.swapRequest(r, tt.host)
			if tt.wantErr {
				if !errors.Is(err, ErrPlaceholder) {
					t.Fatalf("swapRequest = %v, want ErrPlaceholder", err)
				}
				if strings.Contains(err.Error(), pa) || strings.Contains(err.Error(), testValue) {
					t.Errorf("the error %q spells a placeholder or a value", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("swapRequest = %v", err)
			}
			if got := r.URL.String(); got != tt.wantURL {
				t.Errorf("URL = %q, want %q", got, tt.wantURL)
			}
			if got := r.Header; !equalHeader(got, tt.wantHeader) {
				t.Errorf("header = %v, want %v", got, tt.wantHeader)
			}
			if n != tt.n {
				t.Errorf("swaps = %d, want %d", n, tt.n)
			}
		})
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

func TestScrubReader(t *testing.T) {
	s := testSecrets(t,
		engine.Secret{Name: "A", Value: testValue, Hosts: []string{testHost}},
		engine.Secret{Name: "B", Value: "aaaaaaaaaaaab", Hosts: []string{testHost}})
	sc := s.scrubber()
	in := "head " + testValue + " mid " + testValue + testValue + " aaaaaaaaaaaaaaaaab tail " + testValue[:20]
	for _, chunk := range []int{1, 2, 3, 7, 13, 64, 1 << 20} {
		got, err := io.ReadAll(sc.Reader(iotest.OneByteReader(&chunkReader{b: []byte(in), n: chunk})))
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		if bytes.Contains(got, []byte(testValue)) || bytes.Contains(got, []byte("aaaaaaaaaaaab")) {
			t.Errorf("chunk %d: scrubbed = %q, still holds a value", chunk, got)
		}
		if len(got) != len(in) {
			t.Errorf("chunk %d: scrubbed length %d, want %d", chunk, len(got), len(in))
		}
		if !bytes.HasSuffix(got, []byte(testValue[:20])) || !bytes.Contains(got, []byte(s.list[0].placeholder)) {
			t.Errorf("chunk %d: scrubbed = %q, want the value's placeholder and the partial tail kept", chunk, got)
		}
	}
	if v, ok := sc.String("Bearer " + testValue); !ok || v != "Bearer "+s.list[0].placeholder {
		t.Errorf("String = %q, %v, want the placeholder", v, ok)
	}
}

// chunkReader returns at most n bytes a read.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// FuzzScrub checks that no chunking of any body lets a value through, and that a body
// without a value passes unchanged.
func FuzzScrub(f *testing.F) {
	f.Add([]byte("x"+testValue+"y"), uint8(3), uint16(5))
	f.Add([]byte(testValue[:10]), uint8(1), uint16(0))
	f.Add([]byte("sk-ant-api03-sk-ant-api03-REAL"), uint8(7), uint16(9))
	s := testSecrets(f,
		engine.Secret{Name: "A", Value: testValue, Hosts: []string{testHost}},
		engine.Secret{Name: "B", Value: "abababababab", Hosts: []string{testHost}})
	sc := s.scrubber()
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8, at uint16) {
		if len(in) > 1<<16 {
			return
		}
		orig := bytes.Clone(in)
		// Put a value in at some offset too.
		i := int(at) % (len(in) + 1)
		withValue := append(append(append([]byte(nil), in[:i]...), testValue...), in[i:]...)
		for _, body := range [][]byte{orig, withValue} {
			got, err := io.ReadAll(sc.Reader(&chunkReader{b: body, n: int(chunk)%97 + 1}))
			if err != nil && !errors.Is(err, errScrub) {
				t.Fatal(err)
			}
			for _, v := range []string{testValue, "abababababab"} {
				if bytes.Contains(got, []byte(v)) {
					t.Fatalf("scrubbed %q = %q: the value %q got through", body, got, v)
				}
			}
			if err == nil && len(got) != len(body) {
				t.Fatalf("scrubbed length %d, want %d", len(got), len(body))
			}
		}
		if !bytes.Contains(orig, []byte(testValue)) && !bytes.Contains(orig, []byte("abababababab")) {
			got, _ := io.ReadAll(sc.Reader(&chunkReader{b: orig, n: int(chunk)%97 + 1}))
			if !bytes.Equal(got, orig) {
				t.Fatalf("scrubbed %q = %q, want it unchanged", orig, got)
			}
		}
	})
}

// FuzzSwap checks the swap over arbitrary header values and queries: a placeholder
// never reaches a host not among its secret's hosts, and on the secret's host none is
// left where the swap looks.
func FuzzSwap(f *testing.F) {
	s := testSecrets(f,
		engine.Secret{Name: "A", Value: testValue, Hosts: []string{testHost}},
		engine.Secret{Name: "B", Value: "ghp_0123456789abcdefABCDEF01234/+=", Hosts: []string{"git.test"}})
	pa := s.list[0].placeholder
	f.Add("Bearer PA", "q=PA&x=1", true)
	f.Add("Basic PA", "PB", false)
	f.Add("PAPB", "a=%zz", true)
	f.Fuzz(func(t *testing.T, header, query string, ownHost bool) {
		header = strings.ReplaceAll(strings.ReplaceAll(header, "PA", pa), "PB", s.list[1].placeholder)
		query = strings.ReplaceAll(strings.ReplaceAll(query, "PA", pa), "PB", s.list[1].placeholder)
		host := "evil.test"
		if ownHost {
			host = testHost
		}
		r := &http.Request{Header: http.Header{"Authorization": {header}, "X-Api-Key": {header}},
			URL: &url.URL{Scheme: "http", Host: host, Path: "/", RawQuery: query}}
		_, err := s.swapRequest(r, host)
		sent := r.Header.Get("Authorization") + r.Header.Get("X-Api-Key") + r.URL.RawQuery
		hasA := strings.Contains(header+query, pa)
		hasB := strings.Contains(header+query, s.list[1].placeholder)
		switch {
		case hasB || (hasA && !ownHost):
			if !errors.Is(err, ErrPlaceholder) {
				t.Fatalf("swap of %q, %q to %s = %v, want ErrPlaceholder", header, query, host, err)
			}
		case err != nil:
			t.Fatalf("swap of %q, %q to %s = %v", header, query, host, err)
		case strings.Contains(sent, pa):
			t.Fatalf("swap of %q, %q left the placeholder: %q", header, query, sent)
		case !ownHost && strings.Contains(sent, testValue) && !strings.Contains(header+query, testValue):
			t.Fatalf("swap to %s put the value in: %q", host, sent)
		}
	})
}
