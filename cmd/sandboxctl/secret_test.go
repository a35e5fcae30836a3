package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

func TestParseSecrets(t *testing.T) {
	const value = "sk-ant-api03-0123456789abcdef"
	env := map[string]string{"N4_KEY": value, "OTHER": value + "x", "EMPTY": ""}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		vals    []string
		want    []engine.Secret
		wantErr string
	}{
		{"one", []string{"N4_KEY:api.example.com"}, []engine.Secret{{Name: "N4_KEY", Value: value, Hosts: []string{"api.example.com"}}}, ""},
		{"hosts", []string{"N4_KEY:a.example.com,*.example.org", "OTHER:b.test"}, []engine.Secret{
			{Name: "N4_KEY", Value: value, Hosts: []string{"a.example.com", "*.example.org"}},
			{Name: "OTHER", Value: value + "x", Hosts: []string{"b.test"}}}, ""},
		{"unset", []string{"NOPE:a.test"}, nil, "NOPE is empty or unset"},
		{"empty", []string{"EMPTY:a.test"}, nil, "EMPTY is empty or unset"},
		{"no hosts", []string{"N4_KEY"}, nil, "want NAME:host"},
		{"bad name", []string{"N-4:a.test"}, nil, "not an environment variable name"},
		{"scheme", []string{"N4_KEY:https://a.test"}, nil, "hosts[0]"},
		{"port", []string{"N4_KEY:a.test:443"}, nil, "hosts[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSecrets(tt.vals, getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseSecrets(%q) = %v, want an error with %q", tt.vals, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), value) {
					t.Errorf("parseSecrets(%q) error %q holds the value", tt.vals, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseSecrets(%q) = %v", tt.vals, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseSecrets(%q) (-want +got):\n%s", tt.vals, diff)
			}
		})
	}
}
