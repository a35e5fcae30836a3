package modal

import (
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

func TestNormalizeEnvValue(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "", false},
		{"  ", "", false},
		{" ak-1 ", "ak-1", true},
		{`"ak-1"`, "ak-1", true},
		{`' ak-1 '`, "ak-1", true},
		{`""`, "", false},
		{`"ak-1'`, `"ak-1'`, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := NormalizeEnvValue(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("NormalizeEnvValue(%q) = %q, %v, want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestAuthConfigHint(t *testing.T) {
	tests := []struct {
		name, id, secret string
		want             []string
		preflightErr     bool
	}{
		{"valid", "ak-1", "as-2", nil, false},
		{"swapped", "as-2", "ak-1", []string{"look swapped", "MODAL_TOKEN_ID should look like 'ak-...'", "MODAL_TOKEN_SECRET should look like 'as-...'"}, true},
		{"bad id", "token", "as-2", []string{"MODAL_TOKEN_ID should look like 'ak-...'"}, true},
		{"missing secret", "ak-1", "", []string{"Set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"}, true},
		{"both missing", "", "", []string{"Set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AuthConfigHint(tt.id, tt.secret)
			if len(tt.want) == 0 && got != "" {
				t.Errorf("AuthConfigHint(%q, %q) = %q, want \"\"", tt.id, tt.secret, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("AuthConfigHint(%q, %q) = %q, want it to contain %q", tt.id, tt.secret, got, w)
				}
			}
			err := AuthPreflight(tt.id, tt.secret)
			if (err != nil) != tt.preflightErr {
				t.Errorf("AuthPreflight(%q, %q) = %v, want error %v", tt.id, tt.secret, err, tt.preflightErr)
			}
			if pe, ok := err.(*provider.ProviderError); ok && pe.Retryable {
				t.Errorf("preflight error is retryable")
			}
		})
	}
}

func TestAppName(t *testing.T) {
	tests := []struct {
		name, app, suffix, want, wantErr string
	}{
		{"plain", "proliferate-sandbox", "", "proliferate-sandbox", ""},
		{"suffix", "proliferate-sandbox", "dev", "proliferate-sandbox-dev", ""},
		{"missing", "", "dev", "", "MODAL_APP_NAME is required to use the Modal provider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"MODAL_APP_NAME": tt.app, "MODAL_APP_SUFFIX": tt.suffix}
			got, err := AppName(func(k string) string { return env[k] })
			if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Errorf("AppName(%q, %q) = %q, %v, want %q, %q", tt.app, tt.suffix, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestPickImageSource(t *testing.T) {
	tests := []struct {
		name     string
		opts     provider.CreateOptions
		envBase  string
		wantKind string
		wantID   string
	}{
		{"restore", provider.CreateOptions{SnapshotID: "im-1", BaseSnapshotID: "im-b"}, "im-e", "snapshot", "im-1"},
		{"base from options", provider.CreateOptions{BaseSnapshotID: "im-b"}, "im-e", "base-snapshot", "im-b"},
		{"base from env", provider.CreateOptions{}, " im-e ", "base-snapshot", "im-e"},
		{"base image", provider.CreateOptions{}, "", "base-image", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PickImageSource(tt.opts, func(string) string { return tt.envBase })
			if got.Kind != tt.wantKind || got.ID != tt.wantID {
				t.Errorf("PickImageSource = %+v, want %s %q", got, tt.wantKind, tt.wantID)
			}
		})
	}
}
