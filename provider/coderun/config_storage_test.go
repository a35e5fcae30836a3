package coderun

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestParseStorage(t *testing.T) {
	tests := []struct {
		name      string
		toml      string
		env       map[string]string
		wantURL   string
		wantToken string
		wantErr   string
	}{
		{name: "none", toml: ""},
		{name: "turso", toml: `storage_url = "libsql://db-org.turso.io"` + "\n" + `storage_token_env = "TURSO_TOKEN"`,
			env: map[string]string{"TURSO_TOKEN": "tok-secret"}, wantURL: "libsql://db-org.turso.io", wantToken: "tok-secret"},
		{name: "local sqld without a token", toml: `storage_url = "http://127.0.0.1:8080"`, wantURL: "http://127.0.0.1:8080"},
		{name: "token variable unset", toml: `storage_url = "libsql://db.turso.io"` + "\n" + `storage_token_env = "TURSO_TOKEN"`,
			wantErr: "storage_token_env: TURSO_TOKEN is not set"},
		{name: "token variable without a url", toml: `storage_token_env = "TURSO_TOKEN"`, env: map[string]string{"TURSO_TOKEN": "x"},
			wantErr: "storage_token_env is set without storage_url"},
		{name: "bad variable name", toml: `storage_url = "libsql://db.turso.io"` + "\n" + `storage_token_env = "1BAD"`,
			wantErr: `storage_token_env "1BAD" is not an environment variable name`},
		{name: "file url", toml: `storage_url = "file:index.db"`, wantErr: "storage_url: libsql url: scheme \"file\""},
		{name: "token in the url", toml: `storage_url = "libsql://db.turso.io?authToken=tok-secret"`,
			wantErr: "storage_url: libsql url: a query or fragment is not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte("[sandbox]\nenabled = true\n"+tt.toml+"\n"), env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse = %v, want an error with %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "tok-secret") {
					t.Errorf("error %q shows the token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.StorageURL != tt.wantURL || c.StorageToken.Value() != tt.wantToken {
				t.Errorf("Parse = url %q, token %q; want %q, %q", c.StorageURL, c.StorageToken.Value(), tt.wantURL, tt.wantToken)
			}
			// The token never prints.
			j, _ := json.Marshal(c)
			for _, s := range []string{fmt.Sprintf("%v %+v %#v", c, c, c), string(j)} {
				if tt.wantToken != "" && strings.Contains(s, tt.wantToken) {
					t.Errorf("the token shows in %s", s)
				}
			}
		})
	}
}
