package provider

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

var planNow = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func planJSON(t *testing.T, p Plan) []byte {
	t.Helper()
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func freshTwoRepos() CreateOptions {
	return CreateOptions{
		SessionID: "sess-fresh",
		Repos: []RepoSpec{
			{RepoURL: "https://github.com/acme/web.git", Token: "ghs_webtoken", WorkspacePath: "web", Branch: "develop",
				ServiceCommands: []ServiceCommand{{Name: "web", Command: "pnpm dev", Cwd: "app"}}},
			{RepoURL: "https://github.com/acme/api", Token: "ghs_apitoken", WorkspacePath: "api"},
		},
		Branch:          "main",
		EnvVars:         map[string]string{"LLM_PROXY_API_KEY": "proxy-key", "SANDBOX_MCP_AUTH_TOKEN": "mcp-token", "FOO": "bar"},
		SystemPrompt:    "You fix bugs.",
		AgentConfig:     &AgentConfig{AgentType: AgentOpenCode, ModelID: "claude-opus-4.6"},
		SessionType:     SessionCoding,
		SnapshotHasDeps: true,
		ServiceCommands: []ConfigurationServiceCommand{{Name: "web", Command: "pnpm dev", Cwd: "app", WorkspacePath: "web"},
			{Name: "api's worker", Command: "uv run worker --queue 'default'", WorkspacePath: "api"}},
		SecretFileWrites: []SecretFileWrite{{FilePath: " ./api/.env ", Content: "DATABASE_URL=postgres://x\n"}, {FilePath: "../escape", Content: "x"}},
		EnvFiles:         json.RawMessage(`[{"workspacePath":".","path":".env.local","format":"dotenv","mode":"secret","keys":[{"key":"A","required":true}]}]`),
	}
}

func restorePull() (CreateOptions, *SessionMetadata) {
	last := planNow.Add(-2 * time.Hour).UnixMilli()
	return CreateOptions{
			SessionID:  "sess-restore",
			SnapshotID: "snap-123",
			Repos:      []RepoSpec{{RepoURL: "https://github.com/acme/web.git", Token: "ghs_newtoken", WorkspacePath: "."}},
			EnvVars:    map[string]string{"ANTHROPIC_API_KEY": "direct-key", "SANDBOX_MCP_AUTH_TOKEN": "mcp-token"},
		}, &SessionMetadata{SessionID: "sess-restore", RepoDir: "/home/user/workspace", CreatedAt: planNow.Add(-48 * time.Hour).UnixMilli(),
			LastGitFetchAt: &last}
}

func TestPlanGolden(t *testing.T) {
	restore, meta := restorePull()
	tests := []struct {
		name string
		opts CreateOptions
		cfg  PlanConfig
	}{
		{"fresh_two_repos", freshTwoRepos(), PlanConfig{Kind: KindE2B, Now: planNow, GitMode: GitModeToken,
			Settings: HostSettings{LLMProxyBaseURL: "https://llm-proxy.example.com/v1"}}},
		{"restore_pull", restore, PlanConfig{Kind: KindE2B, Now: planNow, Metadata: meta, GitMode: GitModeToken,
			Settings: HostSettings{GitPullOnRestore: true, GitPullCadenceSeconds: 3600}}},
		{"fresh_two_repos_bundle", freshTwoRepos(), PlanConfig{Kind: KindLocal, Now: planNow,
			Settings: HostSettings{LLMProxyBaseURL: "https://llm-proxy.example.com/v1"}}},
		{"restore_pull_bundle", restore, PlanConfig{Kind: KindLocal, Now: planNow, Metadata: meta,
			Settings: HostSettings{GitPullOnRestore: true, GitPullCadenceSeconds: 3600}}},
		{"scratch", CreateOptions{SessionID: "sess-scratch", Repos: []RepoSpec{}, SessionType: SessionSetup}, PlanConfig{Kind: KindModal, Now: planNow}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := BuildPlan(tt.opts, tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, filepath.Join("testdata", "plan_"+tt.name+".json"), planJSON(t, p), *update)
			again, _ := BuildPlan(tt.opts, tt.cfg)
			if diff := cmp.Diff(p, again); diff != "" {
				t.Errorf("BuildPlan not deterministic (-first +second):\n%s", diff)
			}
		})
	}
}

func stepNames(steps []Step) []string {
	var out []string
	for _, s := range steps {
		out = append(out, s.Name)
	}
	return out
}

func findStep(p Plan, name string) (Step, bool) {
	for _, s := range p.Steps() {
		if s.Name == name {
			return s, true
		}
	}
	return Step{}, false
}

func TestBuildPlanErrors(t *testing.T) {
	tests := []struct {
		name string
		opts CreateOptions
		cfg  PlanConfig
		want string
	}{
		{"no session", CreateOptions{}, PlanConfig{Kind: KindE2B, Now: planNow}, "sessionId is required"},
		{"unknown kind", CreateOptions{SessionID: "s"}, PlanConfig{Kind: "coder", Now: planNow}, `unknown provider kind "coder"`},
		{"no clock", CreateOptions{SessionID: "s"}, PlanConfig{Kind: KindE2B}, "now is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildPlan(tt.opts, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("BuildPlan err = %v, want containing %q", err, tt.want)
			}
		})
	}
}

func TestBuildPlanFresh(t *testing.T) {
	p, err := BuildPlan(freshTwoRepos(), PlanConfig{Kind: KindE2B, Now: planNow, GitMode: GitModeToken,
		Settings: HostSettings{LLMProxyBaseURL: "https://proxy/v1"}})
	if err != nil {
		t.Fatal(err)
	}
	wantBlocking := []string{"workspace", "git credentials", "clone web", "clone api", "metadata", "plugin", "global opencode config",
		"repo opencode config", "instructions", "actions guide", "copy tool dependencies",
		"tool verify", "tool verify description", "tool save_snapshot", "tool save_snapshot description",
		"tool automation_complete", "tool automation_complete description", "tool request_env_variables",
		"tool request_env_variables description", "remove setup-only tools", "start opencode"}
	if diff := cmp.Diff(wantBlocking, stepNames(p.Blocking)); diff != "" {
		t.Errorf("blocking steps mismatch (-want +got):\n%s", diff)
	}
	if p.RepoDir != "/home/user/workspace" {
		t.Errorf("RepoDir = %q, want the workspace for two repos", p.RepoDir)
	}
	clone, _ := findStep(p, "clone web")
	if want := `git clone --depth 1 --branch 'develop' 'https://x-access-token:ghs_webtoken@github.com/acme/web.git' '/home/user/workspace/web'`; clone.Command != want {
		t.Errorf("clone web = %q, want %q", clone.Command, want)
	}
	if clone.Fallback == nil || strings.Contains(clone.Fallback.Command, "--branch") || !clone.Fatal {
		t.Errorf("clone web fallback = %+v, want a fatal clone without --branch", clone.Fallback)
	}
	api, _ := findStep(p, "clone api")
	if !strings.Contains(api.Command, "--branch 'main'") {
		t.Errorf("clone api = %q, want the default branch main", api.Command)
	}
	// Quirk decided: a fresh clone records lastGitFetchAt.
	meta, _ := findStep(p, "metadata")
	var m SessionMetadata
	if err := json.Unmarshal([]byte(meta.Content), &m); err != nil || m.LastGitFetchAt == nil || *m.LastGitFetchAt != planNow.UnixMilli() {
		t.Errorf("metadata = %s, want lastGitFetchAt = createdAt", meta.Content)
	}
	// Proxy mode: the key is in the env, never in the config file.
	for _, s := range p.Steps() {
		if strings.Contains(s.Content, "proxy-key") {
			t.Errorf("step %q writes the proxy key into a file", s.Name)
		}
	}
	oc, _ := findStep(p, "start opencode")
	if oc.Env[EnvAnthropicAPIKey] != "proxy-key" || oc.Env[EnvAnthropicBaseURL] != "https://proxy/v1" {
		t.Errorf("opencode env = %v", oc.Env)
	}
	// Secret files: normalised, unsafe ones skipped with a warning.
	if s, ok := findStep(p, "secret file api/.env"); !ok || s.Path != "/home/user/workspace/api/.env" || s.Mode != 0o600 || !s.Secret {
		t.Errorf("secret file step = %+v, %v", s, ok)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "../escape") {
		t.Errorf("warnings = %q, want the unsafe secret path", p.Warnings)
	}
	svc, _ := findStep(p, "service api's worker")
	if svc.Service == nil || svc.Service.Cwd != "/home/user/workspace/api" ||
		svc.Command != `proliferate services start --name 'api'\''s worker' --command 'uv run worker --queue '\''default'\''' --cwd '/home/user/workspace/api'` {
		t.Errorf("service step = %+v", svc)
	}
	if _, ok := findStep(p, "start sandbox-daemon"); !ok {
		t.Errorf("e2b plan has no sandbox-daemon")
	}
}

func TestBuildPlanRestore(t *testing.T) {
	opts, meta := restorePull()
	tests := []struct {
		name      string
		kind      Kind
		settings  HostSettings
		meta      *SessionMetadata
		wantPull  bool
		wantSteps []string
		noSteps   []string
	}{
		{"pull enabled cadence elapsed", KindE2B, HostSettings{GitPullOnRestore: true, GitPullCadenceSeconds: 3600}, meta, true,
			[]string{"kill stale processes", "env profile", "git credentials", "pull .", "record git fetch"}, nil},
		{"cadence not elapsed", KindE2B, HostSettings{GitPullOnRestore: true, GitPullCadenceSeconds: 3 * 3600}, meta, false,
			[]string{"git credentials"}, []string{"pull .", "record git fetch"}},
		{"pull disabled still refreshes credentials", KindModal, HostSettings{}, meta, false,
			[]string{"git credentials"}, []string{"pull .", "kill stale processes", "env profile"}},
		{"legacy sandbox without metadata pulls but records nothing", KindE2B, HostSettings{GitPullOnRestore: true}, nil, true,
			[]string{"pull ."}, []string{"record git fetch"}},
		{"local restore kills nothing", KindLocal, HostSettings{}, meta, false, []string{"env profile"}, []string{"kill stale processes", "start image services"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := BuildPlan(opts, PlanConfig{Kind: tt.kind, Now: planNow, Metadata: tt.meta, Settings: tt.settings, GitMode: GitModeToken})
			if err != nil {
				t.Fatal(err)
			}
			if p.Pull != tt.wantPull || !p.Restore {
				t.Errorf("Pull, Restore = %v, %v, want %v, true", p.Pull, p.Restore, tt.wantPull)
			}
			for _, n := range tt.wantSteps {
				if _, ok := findStep(p, n); !ok {
					t.Errorf("plan lacks step %q: %q", n, stepNames(p.Steps()))
				}
			}
			for _, n := range tt.noSteps {
				if _, ok := findStep(p, n); ok {
					t.Errorf("plan has step %q", n)
				}
			}
			if _, ok := findStep(p, "clone ."); ok {
				t.Errorf("restore clones")
			}
			// Quirk decided: no jq re-export loop.
			for _, s := range p.Steps() {
				if strings.Contains(s.Command, "jq") {
					t.Errorf("step %q runs jq", s.Name)
				}
			}
		})
	}
	p, _ := BuildPlan(opts, PlanConfig{Kind: KindE2B, Now: planNow, Metadata: meta, Settings: HostSettings{GitPullOnRestore: true},
		GitMode: GitModeToken})
	rec, _ := findStep(p, "record git fetch")
	if diff := cmp.Diff([]string{"pull ."}, rec.IfAllOK); diff != "" {
		t.Errorf("record git fetch IfAllOK mismatch (-want +got):\n%s", diff)
	}
	creds, _ := findStep(p, "git credentials")
	if !strings.Contains(creds.Content, "ghs_newtoken") || creds.Mode != 0o600 {
		t.Errorf("credentials = %+v, want the current token, mode 0600", creds)
	}
}

func TestBuildPlanScratchAndKinds(t *testing.T) {
	opts := CreateOptions{SessionID: "s", SSHPublicKey: "ssh-ed25519 AAA", TriggerContext: json.RawMessage(`{"a":1}`),
		EnvVars: map[string]string{"OPENCODE_DISABLE_DEFAULT_PLUGINS": "false"}}
	tests := []struct {
		kind    Kind
		want    []string
		notWant []string
	}{
		{KindModal, []string{"root authorized_keys", "user authorized_keys", "start sshd", "trigger context", "start image services"}, []string{"start sandbox-daemon"}},
		{KindE2B, []string{"start sandbox-daemon", "start image services"}, []string{"start sshd", "trigger context"}},
		{KindLocal, []string{"start sandbox-mcp"}, []string{"start sshd", "start sandbox-daemon", "start image services"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			p, err := BuildPlan(opts, PlanConfig{Kind: tt.kind, Now: planNow})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range tt.want {
				if _, ok := findStep(p, n); !ok {
					t.Errorf("plan lacks %q", n)
				}
			}
			for _, n := range tt.notWant {
				if _, ok := findStep(p, n); ok {
					t.Errorf("plan has %q", n)
				}
			}
			if p.Env[EnvDisableDefaultPlugins] != "true" {
				t.Errorf("OPENCODE_DISABLE_DEFAULT_PLUGINS = %q, want true on %s", p.Env[EnvDisableDefaultPlugins], tt.kind)
			}
			meta, _ := findStep(p, "metadata")
			if meta.Content != `{"sessionId":"s","repoDir":"/home/user/workspace","createdAt":`+itoa(planNow.UnixMilli())+`}` {
				t.Errorf("scratch metadata = %s", meta.Content)
			}
			if len(p.Warnings) != 2 {
				t.Errorf("warnings = %q, want missing LLM key and missing sidecar token", p.Warnings)
			}
		})
	}
}

func TestBuildPlanSetupSession(t *testing.T) {
	p, _ := BuildPlan(CreateOptions{SessionID: "s", SessionType: SessionSetup}, PlanConfig{Kind: KindE2B, Now: planNow})
	if _, ok := findStep(p, "remove setup-only tools"); ok {
		t.Errorf("setup session removes its own tools")
	}
	if _, ok := findStep(p, "tool save_service_commands"); !ok {
		t.Errorf("setup session lacks the setup-only tools")
	}
	p, _ = BuildPlan(CreateOptions{SessionID: "s", ServiceCommands: []ConfigurationServiceCommand{{Name: "a", Command: "b"}}}, PlanConfig{Kind: KindE2B, Now: planNow})
	if _, ok := findStep(p, "service a"); ok {
		t.Errorf("services start without snapshotHasDeps")
	}
}

func TestPlanPathsRooted(t *testing.T) {
	root := "/tmp/sbx"
	p, _ := BuildPlan(CreateOptions{SessionID: "s", Repos: []RepoSpec{{RepoURL: "/src/repo", WorkspacePath: "r"}}},
		PlanConfig{Kind: KindLocal, Now: planNow, Paths: RootedPaths(root), SandboxMCPCommand: "/bin/sandbox mcp", SidecarEnv: map[string]string{"SANDBOX_MCP_ADDR": "127.0.0.1:9"}})
	for _, s := range p.Steps() {
		for _, path := range append([]string{s.Path}, s.Paths...) {
			if path != "" && !strings.HasPrefix(path, root+"/") {
				t.Errorf("step %q path %q outside %s", s.Name, path, root)
			}
		}
	}
	mcp, _ := findStep(p, "start sandbox-mcp")
	if mcp.Command != `exec '/bin/sandbox mcp' api > '/tmp/sbx/tmp/sandbox-mcp.log' 2>&1` || mcp.Env["SANDBOX_MCP_ADDR"] != "127.0.0.1:9" || mcp.Requires != "/bin/sandbox mcp" {
		t.Errorf("start sandbox-mcp = %+v", mcp)
	}
}

func TestModeJSON(t *testing.T) {
	b, _ := json.Marshal(Mode(0o600))
	if string(b) != `"0600"` {
		t.Errorf("Mode JSON = %s", b)
	}
	var m Mode
	if err := json.Unmarshal([]byte(`"0644"`), &m); err != nil || m != 0o644 {
		t.Errorf("Unmarshal = %o, %v", m, err)
	}
	if err := json.Unmarshal([]byte(`"9"`), &m); err == nil {
		t.Errorf("Unmarshal(9) succeeded")
	}
}

func TestFactory(t *testing.T) {
	f := Factory{Constructors: map[Kind]func() (SandboxProvider, error){
		KindLocal: func() (SandboxProvider, error) { return nil, errors.New("built local") },
	}}
	tests := []struct {
		name    string
		def     Kind
		k       Kind
		wantErr string
	}{
		{"no kind no default", "", "", "DEFAULT_SANDBOX_PROVIDER is required when no provider type is supplied"},
		{"unknown", "", "nope", "Unknown sandbox provider: nope"},
		{"explicit", "", KindLocal, "built local"},
		{"default", KindLocal, "", "built local"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.Default = tt.def
			_, err := f.New(tt.k)
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("New(%q) err = %v, want %q", tt.k, err, tt.wantErr)
			}
		})
	}
}

func TestPlanRedacted(t *testing.T) {
	for _, mode := range []GitMode{GitModeToken, GitModeBundle} {
		p, err := BuildPlan(freshTwoRepos(), PlanConfig{Kind: KindE2B, Now: planNow, GitMode: mode,
			Settings: HostSettings{LLMProxyBaseURL: "https://proxy/v1"}})
		if err != nil {
			t.Fatal(err)
		}
		got := string(planJSON(t, p.Redacted()))
		for _, secret := range []string{"ghs_webtoken", "ghs_apitoken", "proxy-key", "mcp-token", "postgres://x"} {
			if !strings.Contains(string(planJSON(t, p)), secret) {
				t.Fatalf("%s: test plan lacks %q", mode, secret)
			}
			if strings.Contains(got, secret) {
				t.Errorf("%s: Redacted plan still holds %q", mode, secret)
			}
		}
		if clone, _ := findStep(p, "clone web"); !strings.Contains(clone.Command, "ghs_webtoken") &&
			(clone.Git == nil || clone.Git.Token != "ghs_webtoken") {
			t.Errorf("%s: Redacted changed the original plan", mode)
		}
	}
}

// In bundle mode (the default) no token reaches anything written or run in
// the sandbox: it is only in the host-side Git spec of git-bundle steps.
func TestBuildPlanBundleMode(t *testing.T) {
	opts := freshTwoRepos()
	opts.Repos = append(opts.Repos, RepoSpec{RepoURL: "https://github.com/acme/public", WorkspacePath: "pub"},
		RepoSpec{RepoURL: "file:///srv/local", Token: "unused", WorkspacePath: "loc"})
	p, err := BuildPlan(opts, PlanConfig{Kind: KindLocal, Now: planNow})
	if err != nil {
		t.Fatal(err)
	}
	if p.GitMode != GitModeBundle {
		t.Errorf("GitMode = %q, want bundle by default", p.GitMode)
	}
	if _, ok := findStep(p, "git credentials"); ok {
		t.Error("bundle mode writes a credentials file")
	}
	web, _ := findStep(p, "clone web")
	want := &GitBundleSpec{RepoURL: "https://github.com/acme/web.git", Token: "ghs_webtoken", Branch: "develop",
		Target: "/home/user/workspace/web", BundlePath: "/tmp/git-boot-web.bundle"}
	if web.Kind != StepGitBundle || !web.Fatal || web.Command != "" {
		t.Errorf("clone web = %+v, want a fatal git-bundle step", web)
	}
	if d := cmp.Diff(want, web.Git); d != "" {
		t.Errorf("clone web spec (-want +got):\n%s", d)
	}
	if api, _ := findStep(p, "clone api"); api.Git == nil || api.Git.Branch != "main" {
		t.Errorf("clone api = %+v, want branch main from the options", api)
	}
	if pub, _ := findStep(p, "clone pub"); pub.Kind != StepRun || !strings.Contains(pub.Command, "https://github.com/acme/public") {
		t.Errorf("clone pub = %+v, want a direct clone: it has no token", pub)
	}
	if loc, _ := findStep(p, "clone loc"); loc.Kind != StepRun || strings.Contains(loc.Command, "unused") {
		t.Errorf("clone loc = %+v, want a direct clone of a file URL, without the token", loc)
	}
	for _, s := range p.Steps() {
		for _, tok := range []string{"ghs_webtoken", "ghs_apitoken"} {
			if strings.Contains(s.Command+s.Content+s.Path, tok) || strings.Contains(compactJSON(s.Env), tok) {
				t.Errorf("step %q carries %s into the sandbox", s.Name, tok)
			}
		}
	}

	restore, meta := restorePull()
	p, err = BuildPlan(restore, PlanConfig{Kind: KindLocal, Now: planNow, Metadata: meta,
		Settings: HostSettings{GitPullOnRestore: true}})
	if err != nil {
		t.Fatal(err)
	}
	creds, _ := findStep(p, "git credentials")
	if creds.Content != "{}" {
		t.Errorf("restore credentials = %q, want {} (stale tokens wiped, none written)", creds.Content)
	}
	pull, _ := findStep(p, "pull .")
	if pull.Kind != StepGitBundle || pull.Git == nil || !pull.Git.Pull || pull.Git.Target != "/home/user/workspace" {
		t.Errorf("pull . = %+v, want a git-bundle pull", pull)
	}
	if _, err := BuildPlan(restore, PlanConfig{Kind: KindLocal, Now: planNow, GitMode: "ssh"}); err == nil {
		t.Error("unknown git mode accepted")
	}
}

func TestBuildPlanSandboxAgent(t *testing.T) {
	tests := []struct {
		name    string
		kind    SessionKind
		wantEnv map[string]string
	}{
		{"task", SessionKindTask, map[string]string{"HOME": "/home/user", "SESSION_ID": "s", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true", "ANTHROPIC_API_KEY": "direct"}},
		{"manager", SessionKindManager, map[string]string{"HOME": "/home/user", "SESSION_ID": "s", "OPENCODE_DISABLE_DEFAULT_PLUGINS": "true", "ANTHROPIC_API_KEY": "direct",
			"PROLIFERATE_GATEWAY_URL": "https://gw", "PROLIFERATE_GATEWAY_AUTH_TOKEN": "tok", "PROLIFERATE_MANAGER_SESSION_ID": "s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := BuildPlan(CreateOptions{SessionID: "s", SessionKind: tt.kind,
				EnvVars: map[string]string{"ANTHROPIC_API_KEY": "direct", "SANDBOX_MCP_AUTH_TOKEN": "tok", "PROLIFERATE_GATEWAY_URL": "https://gw"}},
				PlanConfig{Kind: KindE2B, Now: planNow, SandboxAgent: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := findStep(p, "start opencode"); ok {
				t.Errorf("sandbox-agent plan starts OpenCode")
			}
			agent, ok := findStep(p, "start sandbox-agent")
			if !ok || agent.Command != "exec sandbox-agent server --host 0.0.0.0 --port 2468 --no-token > '/tmp/sandbox-agent.log' 2>&1" {
				t.Fatalf("start sandbox-agent = %+v", agent)
			}
			if diff := cmp.Diff(tt.wantEnv, agent.Env); diff != "" {
				t.Errorf("sandbox-agent env mismatch (-want +got):\n%s", diff)
			}
			if d, _ := findStep(p, "start sandbox-daemon"); strings.Contains(d.Command, "--mode=worker") {
				t.Errorf("daemon = %q, want no --mode=worker", d.Command)
			}
		})
	}
}

func TestBuildPlanRejectsEscapes(t *testing.T) {
	for _, wp := range []string{"../x", "/etc", "a/../../b", ".."} {
		t.Run(wp, func(t *testing.T) {
			_, err := BuildPlan(CreateOptions{SessionID: "s", Repos: []RepoSpec{{RepoURL: "u", WorkspacePath: wp}}}, PlanConfig{Kind: KindLocal, Now: planNow})
			if err == nil || !strings.Contains(err.Error(), "not a relative path inside the workspace") {
				t.Errorf("BuildPlan(workspacePath %q) err = %v, want rejected", wp, err)
			}
		})
	}
	tests := []struct{ name, repoDir, want string }{
		{"inside", "/home/user/workspace/app", "/home/user/workspace/app"},
		{"workspace", "/home/user/workspace", "/home/user/workspace"},
		{"outside", "/etc", "/home/user/workspace"},
		{"dotdot", "/home/user/workspace/../../../etc", "/home/user/workspace"},
		{"prefix trick", "/home/user/workspace-evil", "/home/user/workspace"},
	}
	for _, tt := range tests {
		t.Run("metadata "+tt.name, func(t *testing.T) {
			p, err := BuildPlan(CreateOptions{SessionID: "s", SnapshotID: "snap"}, PlanConfig{Kind: KindLocal, Now: planNow,
				Metadata: &SessionMetadata{RepoDir: tt.repoDir}})
			if err != nil {
				t.Fatal(err)
			}
			if p.RepoDir != tt.want {
				t.Errorf("RepoDir for metadata %q = %q, want %q", tt.repoDir, p.RepoDir, tt.want)
			}
		})
	}
}

// Whatever the options, every file a plan touches stays in the sandbox's home or tmp.
func FuzzBuildPlan(f *testing.F) {
	f.Add("https://github.com/o/r", "tok", "main", "app", "dev", "pnpm dev", "src", "./.env", "/home/user/workspace/app")
	f.Add("u", "", "", ".", "a b", "x", "../..", "../x", "/etc")
	f.Fuzz(func(t *testing.T, url, token, branch, wp, svcName, svcCmd, cwd, secretPath, metaDir string) {
		opts := CreateOptions{SessionID: "s", Branch: branch, SnapshotHasDeps: true,
			Repos:            []RepoSpec{{RepoURL: url, Token: token, WorkspacePath: wp}},
			ServiceCommands:  []ConfigurationServiceCommand{{Name: svcName, Command: svcCmd, Cwd: cwd, WorkspacePath: wp}},
			SecretFileWrites: []SecretFileWrite{{FilePath: secretPath, Content: "x"}}}
		for _, restore := range []bool{false, true} {
			cfg := PlanConfig{Kind: KindE2B, Now: planNow}
			if restore {
				opts.SnapshotID = "snap"
				cfg.Metadata = &SessionMetadata{RepoDir: metaDir}
			}
			p, err := BuildPlan(opts, cfg)
			if err != nil {
				continue
			}
			for _, s := range p.Steps() {
				for _, fp := range append([]string{s.Path}, s.Paths...) {
					if fp != "" && !strings.HasPrefix(fp, "/home/user/") && !strings.HasPrefix(fp, "/tmp/") && fp != "/home/user/workspace" {
						t.Fatalf("step %q touches %q (workspacePath %q, secret %q, metadata %q)", s.Name, fp, wp, secretPath, metaDir)
					}
					if strings.Contains(fp, "/../") || strings.HasSuffix(fp, "/..") {
						t.Fatalf("step %q path %q is not clean", s.Name, fp)
					}
				}
			}
		}
	})
}
