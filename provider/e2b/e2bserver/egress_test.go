package e2bserver

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
)

func TestEgressRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string // the network config; empty: none
		hosts []string
		only  bool
		err   string // part of the error; empty: accepted
	}{
		{"none", ``, nil, false, ""},
		{"empty", `{}`, nil, false, ""},
		{"allow without deny", `{"allowOut":["example.com"]}`, nil, false, ""},
		{"deny all", `{"denyOut":["0.0.0.0/0"]}`, nil, true, ""},
		{"allow list", `{"allowOut":["api.example.com","*.npmjs.org","10.1.2.3","192.168.0.0/16","::1"],"denyOut":["0.0.0.0/0"]}`,
			[]string{"api.example.com", "*.npmjs.org", "10.1.2.3/32", "192.168.0.0/16", "::1/128"}, true, ""},
		{"partial deny", `{"denyOut":["10.0.0.0/8"]}`, nil, false, `network.denyOut "10.0.0.0/8" is not supported`},
		{"deny all and some", `{"denyOut":["0.0.0.0/0","1.2.3.4"]}`, nil, false, `"1.2.3.4"`},
		{"bad host", `{"allowOut":["exa mple.com"],"denyOut":["0.0.0.0/0"]}`, nil, false, `allowOut entry "exa mple.com"`},
		{"bare star", `{"allowOut":["*"]}`, nil, false, `allowOut entry "*"`},
		{"scheme", `{"allowOut":["https://example.com"]}`, nil, false, "allowOut entry"},
		{"leading hyphen", `{"allowOut":["-a.com"]}`, nil, false, "allowOut entry"},
		{"zone", `{"allowOut":["fe80::1%eth0"]}`, nil, false, "allowOut entry"},
		{"empty label", `{"allowOut":["a..com"]}`, nil, false, "allowOut entry"},
	}
	for _, tt := range tests {
		var n *e2bwire.NetworkConfig
		if tt.in != "" {
			n = &e2bwire.NetworkConfig{}
			if err := json.Unmarshal([]byte(tt.in), n); err != nil {
				t.Fatal(err)
			}
		}
		hosts, only, err := egressRules(n)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: egressRules(%s) = %v, want an error with %q", tt.name, tt.in, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("%s: egressRules(%s) = %v, want accepted", tt.name, tt.in, err)
		case tt.err == "" && (only != tt.only || !slices.Equal(hosts, tt.hosts)):
			t.Errorf("%s: egressRules(%s) = %q, only %v; want %q, only %v", tt.name, tt.in, hosts, only, tt.hosts, tt.only)
		}
	}
}

// FuzzEgressRules: whatever the network config, the answer is a refusal or a list of
// valid destinations, and a restricted one only under a denyOut of everything.
func FuzzEgressRules(f *testing.F) {
	f.Add(`{"allowOut":["api.example.com","10.0.0.0/8"],"denyOut":["0.0.0.0/0"]}`)
	f.Add(`{"allowOut":["*.x.y"]}`)
	f.Add(`{"denyOut":["1.2.3.4"]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var n e2bwire.NetworkConfig
		if json.Unmarshal([]byte(body), &n) != nil {
			return
		}
		hosts, only, err := egressRules(&n)
		if err != nil {
			return
		}
		if only != (len(n.DenyOut) > 0) || (!only && hosts != nil) {
			t.Fatalf("egressRules(%s) = %q, only %v", body, hosts, only)
		}
		for _, h := range hosts {
			if !validDestination(h) {
				t.Fatalf("egressRules(%s) kept %q", body, h)
			}
		}
	})
}
