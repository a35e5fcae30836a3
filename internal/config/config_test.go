package config

import "testing"

func TestSidecarURL(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"default", nil, "http://127.0.0.1:4000"},
		{"explicit url wins", map[string]string{"PROLIFERATE_SANDBOX_MCP_URL": "http://h:1/", "SANDBOX_MCP_ADDR": "127.0.0.1:9"}, "http://h:1"},
		{"from wildcard addr", map[string]string{"SANDBOX_MCP_ADDR": "0.0.0.0:4100"}, "http://127.0.0.1:4100"},
		{"from empty host", map[string]string{"SANDBOX_MCP_ADDR": ":4100"}, "http://127.0.0.1:4100"},
		{"from v6 wildcard", map[string]string{"SANDBOX_MCP_ADDR": "[::]:4100"}, "http://[::1]:4100"},
		{"from loopback addr", map[string]string{"SANDBOX_MCP_ADDR": "127.0.0.2:4100"}, "http://127.0.0.2:4100"},
		{"port 0 falls back", map[string]string{"SANDBOX_MCP_ADDR": "127.0.0.1:0"}, "http://127.0.0.1:4000"},
		{"garbage falls back", map[string]string{"SANDBOX_MCP_ADDR": "nonsense"}, "http://127.0.0.1:4000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(func(k string) string { return tt.env[k] }, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if c.SidecarURL != tt.want {
				t.Errorf("Load(%v).SidecarURL = %q, want %q", tt.env, c.SidecarURL, tt.want)
			}
			if cl := LoadClient(func(k string) string { return tt.env[k] }); cl.SidecarURL != tt.want || cl.SidecarURLFrom != c.SidecarURLFrom {
				t.Errorf("LoadClient(%v) = %q from %q, want %q from %q as Load", tt.env, cl.SidecarURL, cl.SidecarURLFrom, tt.want, c.SidecarURLFrom)
			}
		})
	}
}

func TestWorkspaceFallsBackToCwd(t *testing.T) {
	cwd := t.TempDir()
	c, err := Load(func(k string) string {
		if k == "WORKSPACE_DIR" {
			return "/nonexistent/workspace"
		}
		return ""
	}, cwd)
	if err != nil {
		t.Fatal(err)
	}
	if c.WorkspaceDir != cwd {
		t.Errorf("WorkspaceDir = %q, want the working dir %q", c.WorkspaceDir, cwd)
	}
	if c.StateFile() != "/tmp/proliferate/state.json" || c.LogDir() != "/tmp/proliferate/logs" {
		t.Errorf("state file %q, log dir %q; want the contract's defaults", c.StateFile(), c.LogDir())
	}
}

func TestCaddySnippetDefault(t *testing.T) {
	state := t.TempDir()
	c, err := Load(func(k string) string {
		if k == "SANDBOX_MCP_STATE_DIR" {
			return state
		}
		return ""
	}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultCaddySnippet
	if !isDir("/home/user") {
		want = state + "/caddy/user.caddy"
	}
	if c.CaddySnippet != want {
		t.Errorf("CaddySnippet = %q, want %q", c.CaddySnippet, want)
	}
	c, _ = Load(func(k string) string {
		if k == "SANDBOX_MCP_CADDY_SNIPPET" {
			return "/x/y.caddy"
		}
		return ""
	}, t.TempDir())
	if c.CaddySnippet != "/x/y.caddy" {
		t.Errorf("CaddySnippet with the env set = %q, want /x/y.caddy", c.CaddySnippet)
	}
}

func TestWorkspaceDir(t *testing.T) {
	cwd, ws := t.TempDir(), t.TempDir()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "WORKSPACE_DIR" {
				return v
			}
			return ""
		}
	}
	if got, err := WorkspaceDir(env(ws), cwd); err != nil || got != ws {
		t.Errorf("WorkspaceDir(set) = %q, %v; want %q", got, err, ws)
	}
	if !isDir(DefaultWorkspaceDir) {
		if got, err := WorkspaceDir(env(""), cwd); err != nil || got != cwd {
			t.Errorf("WorkspaceDir(unset) = %q, %v; want the working dir %q", got, err, cwd)
		}
		if got, err := EnvWorkspaceDir(env(""), cwd); err != nil || got != cwd {
			t.Errorf("EnvWorkspaceDir(unset) = %q, %v; want the working dir %q", got, err, cwd)
		}
		if isDir(DefaultWorkspaceDir) {
			t.Errorf("resolving the workspace created %s", DefaultWorkspaceDir)
		}
	}
	if got, err := EnvWorkspaceDir(env("/nonexistent/ws"), cwd); err != nil || got != "/nonexistent/ws" {
		t.Errorf("EnvWorkspaceDir(set, missing) = %q, %v; want it as given", got, err)
	}
}

func TestSettingsCoverLoad(t *testing.T) {
	read := map[string]bool{}
	if _, err := Load(func(k string) string { read[k] = true; return "" }, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, s := range Settings {
		listed[s.Env] = true
		if s.Default == "" || s.Help == "" || !(s.Server || s.CLI) {
			t.Errorf("setting %s lacks a default, help or a binary", s.Env)
		}
	}
	for k := range read {
		if !listed[k] {
			t.Errorf("Load reads %s but Settings does not list it (help would not show it)", k)
		}
	}
}

func TestMaxTerminals(t *testing.T) {
	tests := []struct {
		env     string
		want    int
		wantErr bool
	}{
		{"", 0, false},
		{"1", 1, false},
		{"200", 200, false},
		{"0", 0, true},
		{"-3", 0, true},
		{"many", 0, true},
		{"5000", 0, true},
	}
	for _, tt := range tests {
		c, err := Load(func(k string) string {
			if k == "SANDBOX_MCP_MAX_TERMINALS" {
				return tt.env
			}
			return ""
		}, t.TempDir())
		if (err != nil) != tt.wantErr || c.MaxTerminals != tt.want {
			t.Errorf("Load(SANDBOX_MCP_MAX_TERMINALS=%q) = %d, %v; want %d, error %v", tt.env, c.MaxTerminals, err, tt.want, tt.wantErr)
		}
	}
}

func TestLoadClientToken(t *testing.T) {
	tests := []struct {
		env             map[string]string
		token, fromName string
	}{
		{nil, "", ""},
		{map[string]string{"SANDBOX_MCP_AUTH_TOKEN": "a", "SERVICE_TO_SERVICE_AUTH_TOKEN": "b"}, "a", "SANDBOX_MCP_AUTH_TOKEN"},
		{map[string]string{"SERVICE_TO_SERVICE_AUTH_TOKEN": "b"}, "b", "SERVICE_TO_SERVICE_AUTH_TOKEN"},
	}
	for _, tt := range tests {
		c := LoadClient(func(k string) string { return tt.env[k] })
		if c.Token != tt.token || c.TokenFrom != tt.fromName {
			t.Errorf("LoadClient(%v) token %q from %q, want %q from %q", tt.env, c.Token, c.TokenFrom, tt.token, tt.fromName)
		}
	}
}
