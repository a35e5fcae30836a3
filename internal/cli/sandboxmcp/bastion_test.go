package sandboxmcp

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
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

// TestBastionCommandsHelp: help of the controller and the relay exits 0 with
// its flags on stdout, like every other command's; a bad flag exits 1.
func TestBastionCommandsHelp(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		{"sandbox-mcp_bastion", []string{"bastion", "--help"}},
		{"sandbox-mcp_bastion", []string{"bastion", "--ports", "3000", "-h"}},
		{"sandbox-mcp_relay", []string{"relay", "-help"}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), tt.args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if code != 0 || stderr.Len() != 0 {
			t.Errorf("run(%q) = %d, stderr %q; want 0 and nothing on stderr", tt.args, code, stderr.String())
		}
		testutil.Golden(t, filepath.Join("testdata", "help", tt.golden+".golden"), stdout.Bytes(), *update)
	}
	for _, args := range [][]string{{"bastion", "--nope"}, {"relay", "--nope"}} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "usage: sandbox-mcp "+args[0]) {
			t.Errorf("run(%q) = %d, stdout %q, stderr %q; want 1, the usage on stderr only", args, code, stdout.String(), stderr.String())
		}
	}
}
