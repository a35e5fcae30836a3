package sandboxmcp

import (
	"bytes"
	"strings"
	"testing"
)

// TestBastionCommandsRefuse: the controller and the relay refuse, before
// listening on anything, what they cannot run with.
func TestBastionCommandsRefuse(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bastion without a token", []string{"bastion", "--ports", "3000", "--relay-socket", "/nonexistent/r.sock"}, nil, "SANDBOX_BASTION_TOKEN is empty"},
		{"bastion bad ports", []string{"bastion", "--ports", "3000,x"}, map[string]string{"SANDBOX_BASTION_TOKEN": "t"}, "want port numbers"},
		{"bastion no relay", []string{"bastion", "--ports", "3000"}, map[string]string{"SANDBOX_BASTION_TOKEN": "t"}, "RelaySocket are required"},
		{"relay without a socket", []string{"relay"}, nil, "--socket is required"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), tt.args, func(k string) string { return tt.env[k] }, strings.NewReader(""), &stdout, &stderr)
		if code != 1 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("%s: run(%q) = %d, stderr %q; want 1 and %q", tt.name, tt.args, code, stderr.String(), tt.want)
		}
	}
}
