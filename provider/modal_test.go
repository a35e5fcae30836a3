package provider

import (
	"strings"
	"testing"
)

func TestNormalizeModalEnvValue(t *testing.T) {
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
			got, ok := NormalizeModalEnvValue(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("NormalizeModalEnvValue(%q) = %q, %v, want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestModalAuthConfigHint(t *testing.T) {
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
			got := ModalAuthConfigHint(tt.id, tt.secret)
			if len(tt.want) == 0 && got != "" {
				t.Errorf("ModalAuthConfigHint(%q, %q) = %q, want \"\"", tt.id, tt.secret, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("ModalAuthConfigHint(%q, %q) = %q, want it to contain %q", tt.id, tt.secret, got, w)
				}
			}
			err := ModalAuthPreflight(tt.id, tt.secret)
			if (err != nil) != tt.preflightErr {
				t.Errorf("ModalAuthPreflight(%q, %q) = %v, want error %v", tt.id, tt.secret, err, tt.preflightErr)
			}
			if pe, ok := err.(*ProviderError); ok && pe.Retryable {
				t.Errorf("preflight error is retryable")
			}
		})
	}
}

func TestModalAppName(t *testing.T) {
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
			got, err := ModalAppName(func(k string) string { return env[k] })
			if got != tt.want || (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Errorf("ModalAppName(%q, %q) = %q, %v, want %q, %q", tt.app, tt.suffix, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestModalImageSource(t *testing.T) {
	tests := []struct {
		name     string
		opts     CreateOptions
		envBase  string
		wantKind string
		wantID   string
	}{
		{"restore", CreateOptions{SnapshotID: "im-1", BaseSnapshotID: "im-b"}, "im-e", "snapshot", "im-1"},
		{"base from options", CreateOptions{BaseSnapshotID: "im-b"}, "im-e", "base-snapshot", "im-b"},
		{"base from env", CreateOptions{}, " im-e ", "base-snapshot", "im-e"},
		{"base image", CreateOptions{}, "", "base-image", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ModalImageSource(tt.opts, func(string) string { return tt.envBase })
			if got.Kind != tt.wantKind || got.ID != tt.wantID {
				t.Errorf("ModalImageSource = %+v, want %s %q", got, tt.wantKind, tt.wantID)
			}
		})
	}
}
