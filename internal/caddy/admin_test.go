package caddy

import "testing"

func TestParseAdmin(t *testing.T) {
	tests := []struct {
		in, network, dial string
		wantErr           bool
	}{
		{"localhost:2019", "tcp", "localhost:2019", false},
		{":2019", "tcp", "localhost:2019", false},
		{"http://127.0.0.1:2019", "tcp", "127.0.0.1:2019", false},
		{"http://127.0.0.1:2019/", "tcp", "127.0.0.1:2019", false},
		{"unix//run/caddy/admin.sock", "unix", "/run/caddy/admin.sock", false},
		{"unix/relative.sock", "", "", true},
		{"https://localhost:2019", "", "", true},
		{"localhost", "", "", true},
	}
	for _, tt := range tests {
		a, err := parseAdmin(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseAdmin(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if a.network != tt.network || a.dial != tt.dial {
			t.Errorf("parseAdmin(%q) = %s %s, want %s %s", tt.in, a.network, a.dial, tt.network, tt.dial)
		}
	}
}
