package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// StepKind says what a Step does.
type StepKind string

// Step kinds. File steps are executed natively by an executor (no shell); command
// steps run with bash.
const (
	// StepMkdir creates Path and its parents.
	StepMkdir StepKind = "mkdir"
	// StepWrite writes Content to Path with Mode, creating parent directories.
	StepWrite StepKind = "write"
	// StepTouch creates Path if it does not exist, never truncating it.
	StepTouch StepKind = "touch"
	// StepRemove removes Paths; missing files are fine.
	StepRemove StepKind = "remove"
	// StepRun runs Command and waits for it, at most Timeout.
	StepRun StepKind = "run"
	// StepStart starts Command as a long-running background process. Its command ends
	// in exec, so the process started is the program itself: signals reach it and its
	// parent reaps it, with no shell in between.
	StepStart StepKind = "start"
	// StepService starts Service through the sandbox's service manager; Command is the
	// equivalent `proliferate services start` invocation.
	StepService StepKind = "service"
	// StepGitBundle gets a repo into the sandbox without a credential: the host
	// fetches Git.RepoURL into its mirror with the token, writes a bundle to
	// Git.BundlePath and clones (or, with Git.Pull, fetches and fast-forwards)
	// from it inside; see ExecGitBundle.
	StepGitBundle StepKind = "git-bundle"
)

// GitMode says how a sandbox gets its repos.
type GitMode string

// Git modes.
const (
	// GitModeBundle, the default: the host fetches with the token and hands the
	// sandbox a bundle; origin is the plain URL and no credential is written.
	// Repos without a token are cloned directly: there is nothing to protect.
	GitModeBundle GitMode = "bundle"
	// GitModeToken, on explicit opt-in only, is the old behaviour: clone URLs and
	// the credentials file in the sandbox carry the tokens.
	GitModeToken GitMode = "token"
)

// GitBundleSpec is what a StepGitBundle step needs.
type GitBundleSpec struct {
	RepoURL string `json:"repoUrl"`
	// Token is used on the host only and never written into the sandbox.
	Token string `json:"token,omitempty"`
	// Branch is the branch to clone; "" or a missing branch means the remote's
	// default branch.
	Branch string `json:"branch,omitempty"`
	// Target is the repo's directory inside the sandbox.
	Target string `json:"target"`
	// BundlePath is where the bundle is written inside the sandbox (removed after).
	BundlePath string `json:"bundlePath"`
	// Pull fetches into refs/remotes/origin/* of an existing clone and
	// fast-forwards its branch, as pull on restore does.
	Pull bool `json:"pull,omitempty"`
}

// StepNameSandboxMCP is the name of the step that starts the sandbox-mcp API; an
// executor that returns the API's URL waits for its health after this step.
const StepNameSandboxMCP = "start sandbox-mcp"

// Mode is a file mode that encodes as an octal string ("0644").
type Mode fs.FileMode

// MarshalJSON encodes the mode as "0644".
func (m Mode) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("%04o", uint32(m)))
}

// UnmarshalJSON decodes "0644".
func (m *Mode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	n, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return fmt.Errorf("parse mode %q: %w", s, err)
	}
	*m = Mode(n)
	return nil
}

// ServiceStart is a service the boot starts through sandbox-mcp.
type ServiceStart struct {
	Name    string `json:"name"`
	Command string `json:"command"`
	Cwd     string `json:"cwd"`
}

// Step is one action of a boot plan.
type Step struct {
	// Name identifies the step ("clone frontend", "start sandbox-mcp").
	Name string   `json:"name"`
	Kind StepKind `json:"kind"`
	// Path, Mode and Content describe file steps.
	Path    string   `json:"path,omitempty"`
	Paths   []string `json:"paths,omitempty"`
	Mode    Mode     `json:"mode,omitempty"`
	Content string   `json:"content,omitempty"`
	// Secret marks Content that must never be logged.
	Secret bool `json:"secret,omitempty"`
	// Command is a bash command line; every value in it went through ShellEscape.
	Command string `json:"command,omitempty"`
	// Env is added to the plan's Env for this command.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutMs bounds a run step; for a start step it is the process's lifetime.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Fatal steps end the boot when they fail; the others are logged and skipped.
	Fatal bool `json:"fatal,omitempty"`
	// Requires is a program name or absolute path the step needs; when it is absent
	// the step is skipped and reported, never faked.
	Requires string `json:"requires,omitempty"`
	// Fallback runs when the step's command exits non-zero; the step succeeds if it does.
	Fallback *Step `json:"fallback,omitempty"`
	// IfAllOK names earlier steps that must all have succeeded for this one to run.
	IfAllOK []string `json:"ifAllOk,omitempty"`
	// Service is set for StepService.
	Service *ServiceStart `json:"service,omitempty"`
	// Git is set for StepGitBundle.
	Git *GitBundleSpec `json:"git,omitempty"`
}

// Timeout is TimeoutMs as a duration.
func (s Step) Timeout() time.Duration { return time.Duration(s.TimeoutMs) * time.Millisecond }

// Plan is the ordered boot of one sandbox: Blocking steps run before the sandbox is
// returned to the caller, Background steps after (fire and forget on cloud providers).
type Plan struct {
	Provider  Kind   `json:"provider"`
	SessionID string `json:"sessionId"`
	// Restore is true when booting from a snapshot.
	Restore    bool   `json:"restore"`
	SnapshotID string `json:"snapshotId,omitempty"`
	// RepoDir is where OpenCode runs: the single repo, or the workspace.
	RepoDir string `json:"repoDir"`
	// Env is the sandbox environment every command runs with.
	Env map[string]string `json:"env"`
	// ProxyMode says OpenCode reaches the LLM through the proxy.
	ProxyMode bool `json:"proxyMode"`
	// Pull says the restore pulls its repos (ShouldPullOnRestore).
	Pull bool `json:"pull"`
	// GitMode is how the repos get into the sandbox.
	GitMode    GitMode  `json:"gitMode"`
	Warnings   []string `json:"warnings,omitempty"`
	Blocking   []Step   `json:"blocking"`
	Background []Step   `json:"background"`
}

// Steps is Blocking followed by Background.
func (p Plan) Steps() []Step { return append(append([]Step{}, p.Blocking...), p.Background...) }

// PlanConfig is everything BuildPlan needs besides the CreateOptions.
type PlanConfig struct {
	// Kind is the provider the plan is for.
	Kind Kind
	// Paths is the sandbox layout; zero means DefaultPaths.
	Paths Paths
	// Settings are the host settings (pull on restore, cadence, LLM proxy).
	Settings HostSettings
	// Now is the boot time (createdAt, lastGitFetchAt); required.
	Now time.Time
	// Metadata is the SessionMetadata read from the restored sandbox, nil when absent.
	Metadata *SessionMetadata
	// SandboxMCPCommand is how sandbox-mcp is invoked; empty means "sandbox-mcp".
	SandboxMCPCommand string
	// SandboxAgent selects the newer boot split: OpenCode is not started by the boot;
	// a sandbox-agent server (port 2468) launches agents on demand, and the sandbox
	// daemon runs without --mode=worker.
	SandboxAgent bool
	// SidecarEnv is added to sandbox-mcp's environment (a local provider sets its
	// listen address and state directory here).
	SidecarEnv map[string]string
	// GitMode is how repos with a token get into the sandbox; "" means
	// GitModeBundle (no credential inside). GitModeToken is the old behaviour.
	GitMode GitMode
}

// BuildPlan turns the create options into the ordered boot plan of one sandbox. It is
// pure: the same inputs give the same plan.
func BuildPlan(opts CreateOptions, cfg PlanConfig) (Plan, error) {
	if opts.SessionID == "" {
		return Plan{}, errors.New("build plan: sessionId is required")
	}
	switch cfg.Kind {
	case KindModal, KindE2B, KindLocal:
	default:
		return Plan{}, fmt.Errorf("build plan: unknown provider kind %q", cfg.Kind)
	}
	if cfg.Now.IsZero() {
		return Plan{}, errors.New("build plan: now is required")
	}
	switch cfg.GitMode {
	case "":
		cfg.GitMode = GitModeBundle
	case GitModeBundle, GitModeToken:
	default:
		return Plan{}, fmt.Errorf("build plan: unknown git mode %q", cfg.GitMode)
	}
	for _, r := range opts.Repos {
		if !validWorkspacePath(r.WorkspacePath) {
			return Plan{}, fmt.Errorf("build plan: repo %s: workspacePath %q is not a relative path inside the workspace", r.RepoURL, r.WorkspacePath)
		}
	}
	p := cfg.Paths
	if p == (Paths{}) {
		p = DefaultPaths()
	}
	caddyfile, err := defaultCaddyfile(p)
	if err != nil {
		return Plan{}, fmt.Errorf("build plan: %w", err)
	}
	snippet, err := defaultSnippet()
	if err != nil {
		return Plan{}, fmt.Errorf("build plan: %w", err)
	}
	b := &planBuilder{opts: opts, cfg: cfg, p: p, caddyfile: caddyfile, snippet: snippet}
	b.plan = Plan{
		Provider:   cfg.Kind,
		SessionID:  opts.SessionID,
		Restore:    opts.SnapshotID != "",
		SnapshotID: opts.SnapshotID,
		GitMode:    cfg.GitMode,
		Blocking:   []Step{},
		Background: []Step{},
	}
	b.env = PrepareSandboxEnv(opts.SessionID, opts.EnvVars, cfg.Settings.LLMProxyBaseURL)
	b.plan.Env = b.env.Env
	b.plan.ProxyMode = b.env.ProxyMode()

	b.workspace()
	b.essentials()
	b.additional()
	return b.plan, nil
}

type planBuilder struct {
	opts CreateOptions
	cfg  PlanConfig
	p    Paths
	env  SandboxEnv
	plan Plan

	caddyfile, snippet string
}

func (b *planBuilder) block(s Step) { b.plan.Blocking = append(b.plan.Blocking, s) }
func (b *planBuilder) bg(s Step)    { b.plan.Background = append(b.plan.Background, s) }
func (b *planBuilder) warn(format string, args ...any) {
	b.plan.Warnings = append(b.plan.Warnings, fmt.Sprintf(format, args...))
}

func (b *planBuilder) now() int64 { return b.cfg.Now.UnixMilli() }

func writeStep(name, p string, mode fs.FileMode, content string) Step {
	return Step{Name: name, Kind: StepWrite, Path: p, Mode: Mode(mode), Content: content}
}

func compactJSON(v any) string {
	out, _ := json.Marshal(v)
	return string(out)
}

func prettyJSON(v any) string {
	out, _ := json.MarshalIndent(v, "", "  ")
	return string(out)
}

// workspace is the workspace setup: clone on a fresh boot, find the repo dir on a
// restore.
func (b *planBuilder) workspace() {
	ws := b.p.Workspace()
	if b.plan.Restore {
		b.plan.RepoDir = ws
		if m := b.cfg.Metadata; m != nil && m.RepoDir != "" {
			// The metadata comes from inside the sandbox: a repo dir outside the
			// workspace would make the boot write files elsewhere.
			if d := path.Clean(m.RepoDir); d == ws || strings.HasPrefix(d, ws+"/") {
				b.plan.RepoDir = d
			} else {
				b.warn("metadata repoDir %q is outside the workspace; using the workspace", m.RepoDir)
			}
		}
		if b.cfg.Kind == KindE2B {
			// A resumed E2B sandbox may still run the previous boot's processes.
			b.block(Step{Name: "kill stale processes", Kind: StepRun, Command: StaleProcessKillCommand,
				TimeoutMs: StaleKillTimeout.Milliseconds()})
		}
		if b.cfg.Kind != KindModal {
			// The old code also ran a jq loop that re-exported this profile in a shell of
			// its own, which had no effect; it is left out on purpose.
			b.block(Step{Name: "env profile", Kind: StepWrite, Path: b.p.EnvProfileFile(), Mode: 0o600,
				Content: compactJSON(b.env.EnvProfile()), Secret: true})
		}
		return
	}
	b.block(Step{Name: "workspace", Kind: StepMkdir, Path: ws, Mode: 0o755, Fatal: true})
	if len(b.opts.Repos) == 0 {
		b.plan.RepoDir = ws
		b.block(writeStep("metadata", b.p.MetadataFile(), 0o644,
			compactJSON(SessionMetadata{SessionID: b.opts.SessionID, RepoDir: ws, CreatedAt: b.now()})))
		return
	}
	if creds := BuildGitCredentialsMap(b.tokenRepos()); len(creds) > 0 {
		s := writeStep("git credentials", b.p.GitCredentialsFile(), 0o600, compactJSON(creds))
		s.Secret = true
		b.block(s)
	}
	for _, r := range b.opts.Repos {
		target := b.p.RepoDir(r.WorkspacePath)
		branch := r.Branch
		if branch == "" {
			branch = b.opts.Branch
		}
		if b.bundled(r) {
			b.block(Step{Name: "clone " + repoLabel(r), Kind: StepGitBundle, TimeoutMs: CloneTimeout.Milliseconds(),
				Fatal: true, Requires: "git", Git: b.bundleSpec(r, branch, target, false)})
			continue
		}
		url := AuthenticatedCloneURL(r.RepoURL, r.Token)
		s := Step{Name: "clone " + repoLabel(r), Kind: StepRun, Command: BuildCloneCommand(url, branch, target),
			TimeoutMs: CloneTimeout.Milliseconds(), Fatal: true, Requires: "git"}
		if branch != "" {
			// A missing branch falls back to the repo's default branch; decided on the
			// exit code, which the old E2B code never saw (its SDK threw first).
			fb := s
			fb.Name += " (default branch)"
			fb.Command = BuildCloneCommand(url, "", target)
			s.Fallback = &fb
		}
		b.block(s)
	}
	b.plan.RepoDir = ws
	if len(b.opts.Repos) == 1 {
		b.plan.RepoDir = b.p.RepoDir(b.opts.Repos[0].WorkspacePath)
	}
	// A fresh clone is a fetch, so it records lastGitFetchAt; the old code left it
	// unset, which made the first restore pull even within the cadence.
	now := b.now()
	b.block(writeStep("metadata", b.p.MetadataFile(), 0o644,
		prettyJSON(SessionMetadata{SessionID: b.opts.SessionID, RepoDir: b.plan.RepoDir, CreatedAt: now, LastGitFetchAt: &now})))
}

// bundled reports whether r reaches the sandbox as a host-made bundle: in
// bundle mode, every repo with a token.
func (b *planBuilder) bundled(r RepoSpec) bool {
	return b.cfg.GitMode == GitModeBundle && r.Token != ""
}

// tokenRepos are the repos whose token goes into the sandbox: none in bundle mode.
func (b *planBuilder) tokenRepos() []RepoSpec {
	if b.cfg.GitMode == GitModeBundle {
		return nil
	}
	return b.opts.Repos
}

func (b *planBuilder) bundleSpec(r RepoSpec, branch, target string, pull bool) *GitBundleSpec {
	name, label := "boot", repoLabel(r)
	if pull {
		name = "pull"
	}
	if label == "." {
		label = "workspace"
	}
	return &GitBundleSpec{RepoURL: r.RepoURL, Token: r.Token, Branch: branch, Target: target, Pull: pull,
		BundlePath: path.Join(b.p.Tmp, "git-"+name+"-"+strings.ReplaceAll(label, "/", "_")+".bundle")}
}

// validWorkspacePath reports whether a repo's workspacePath stays inside the
// workspace: "" or ".", or a relative path without ".." segments.
func validWorkspacePath(wp string) bool {
	return wp == "" || wp == "." || IsValidTargetPath(wp)
}

func repoLabel(r RepoSpec) string {
	if r.WorkspacePath == "" || r.WorkspacePath == "." {
		return "."
	}
	return r.WorkspacePath
}

// essentials are the files and processes the agent needs before the sandbox is handed out.
func (b *planBuilder) essentials() {
	repoDir := b.plan.RepoDir
	localTool := path.Join(repoDir, ".opencode/tool")
	model := DefaultModelID
	if b.opts.AgentConfig != nil && b.opts.AgentConfig.ModelID != "" {
		model = b.opts.AgentConfig.ModelID
	}
	oc := OpencodeOptions{LiteLLM: true, Paths: b.p}
	if b.env.ProxyMode() {
		// Only the URL: the key travels in the environment, never in a file.
		oc.ProxyBaseURL = b.env.ProxyBaseURL
	}
	global := NewOpencodeConfig(ToOpencodeModelID(model), oc).JSON()
	oc.Instructions = []string{".opencode/instructions.md", "AGENTS.md"}
	perRepo := NewOpencodeConfig(ToOpencodeModelID(model), oc).JSON()
	prompt := b.opts.SystemPrompt
	if prompt == "" {
		prompt = DefaultSystemPrompt
	}

	b.block(writeStep("plugin", b.p.PluginFile(), 0o644, PluginMJS))
	b.block(writeStep("global opencode config", b.p.GlobalOpencodeConfig(), 0o644, global))
	b.block(writeStep("repo opencode config", path.Join(repoDir, "opencode.json"), 0o644, perRepo))
	b.block(writeStep("instructions", path.Join(repoDir, ".opencode/instructions.md"), 0o644, prompt+"\n\n"+EnvInstructions))
	b.block(writeStep("actions guide", path.Join(repoDir, ".proliferate/actions-guide.md"), 0o644, ActionsBootstrap))
	tools := b.p.PreinstalledToolsDir()
	b.block(Step{Name: "copy tool dependencies", Kind: StepRun, Requires: tools, TimeoutMs: ToolsCopyTimeout.Milliseconds(),
		Command: "mkdir -p " + ShellEscape(localTool) +
			" && cp " + ShellEscape(tools+"/package.json") + " " + ShellEscape(localTool+"/") +
			" && cp -r " + ShellEscape(tools+"/node_modules") + " " + ShellEscape(localTool+"/")})
	setup := b.opts.SessionType == SessionSetup
	var rm []string
	for _, t := range Tools() {
		if t.SetupOnly && !setup {
			// Removed, not just left out, so they do not leak from a setup session's snapshot.
			rm = append(rm, path.Join(localTool, t.Name+".ts"), path.Join(localTool, t.Name+".txt"))
			continue
		}
		b.block(writeStep("tool "+t.Name, path.Join(localTool, t.Name+".ts"), 0o644, ToolSource(t)))
		b.block(writeStep("tool "+t.Name+" description", path.Join(localTool, t.Name+".txt"), 0o644, t.Description+"\n"))
	}
	if len(rm) > 0 {
		b.block(Step{Name: "remove setup-only tools", Kind: StepRemove, Paths: rm})
	}
	if b.cfg.Kind == KindModal && b.opts.SSHPublicKey != "" {
		b.block(writeStep("root authorized_keys", "/root/.ssh/authorized_keys", 0o600, b.opts.SSHPublicKey))
		b.block(writeStep("user authorized_keys", path.Join(b.p.Home, ".ssh/authorized_keys"), 0o600, b.opts.SSHPublicKey))
		b.block(Step{Name: "start sshd", Kind: StepRun, Requires: "/usr/sbin/sshd", TimeoutMs: ExecTimeout.Milliseconds(),
			Command: "ssh-keygen -A 2>/dev/null || true; mkdir -p /run/sshd; /usr/sbin/sshd"})
	}
	if b.cfg.Kind == KindModal && len(b.opts.TriggerContext) > 0 {
		var v any
		if json.Unmarshal(b.opts.TriggerContext, &v) == nil {
			b.block(writeStep("trigger context", path.Join(repoDir, ".proliferate/trigger-context.json"), 0o644, prettyJSON(v)))
		}
	}
	if b.cfg.SandboxAgent {
		return // sandbox-agent starts in the background phase and launches OpenCode itself
	}
	b.block(Step{Name: "start opencode", Kind: StepStart, Requires: "opencode", Env: b.agentEnv(),
		TimeoutMs: BackgroundProcessTimeout.Milliseconds(),
		Command: "cd " + ShellEscape(repoDir) + " && exec opencode serve --print-logs --log-level ERROR --port " +
			strconv.Itoa(PortOpenCode) + " --hostname 0.0.0.0 > " + ShellEscape(b.p.OpenCodeLog()) + " 2>&1"})
}

// agentEnv is the environment of the process that runs the agent: the proxy key and
// URL in proxy mode, else the direct key.
func (b *planBuilder) agentEnv() map[string]string {
	env := map[string]string{EnvSessionID: b.opts.SessionID, EnvDisableDefaultPlugins: "true"}
	switch {
	case b.env.ProxyMode():
		env[EnvAnthropicAPIKey] = b.env.ProxyAPIKey
		env[EnvAnthropicBaseURL] = b.env.ProxyBaseURL
	case b.opts.EnvVars[EnvAnthropicAPIKey] != "":
		env[EnvAnthropicAPIKey] = b.opts.EnvVars[EnvAnthropicAPIKey]
	default:
		b.warn("no LLM credentials: the agent starts without ANTHROPIC_API_KEY")
	}
	return env
}

// additional is the background phase: pull on restore, services, Caddy, sandbox-mcp
// and the session's own services.
func (b *planBuilder) additional() {
	if b.plan.Restore {
		// Rewritten on every restore, whatever the provider, so a snapshot never keeps
		// serving a stale token (the old Modal code only did it when pulling).
		s := writeStep("git credentials", b.p.GitCredentialsFile(), 0o600, compactJSON(BuildGitCredentialsMap(b.tokenRepos())))
		s.Secret = true
		b.bg(s)
		var last *int64
		if b.cfg.Metadata != nil {
			last = b.cfg.Metadata.LastGitFetchAt
		}
		b.plan.Pull = ShouldPullOnRestore(PullDecision{Enabled: b.cfg.Settings.GitPullOnRestore, HasSnapshot: true,
			RepoCount: len(b.opts.Repos), CadenceSeconds: b.cfg.Settings.GitPullCadenceSeconds,
			LastGitFetchAt: last, Now: b.cfg.Now})
		if b.plan.Pull {
			var pulls []string
			for _, r := range b.opts.Repos {
				name := "pull " + repoLabel(r)
				pulls = append(pulls, name)
				if b.bundled(r) {
					b.bg(Step{Name: name, Kind: StepGitBundle, Requires: "git", TimeoutMs: PullTimeout.Milliseconds(),
						Git: b.bundleSpec(r, "", b.p.RepoDir(r.WorkspacePath), true)})
					continue
				}
				b.bg(Step{Name: name, Kind: StepRun, Requires: "git", TimeoutMs: PullTimeout.Milliseconds(),
					Command: BuildPullCommand(b.p.RepoDir(r.WorkspacePath))})
			}
			if b.cfg.Metadata != nil {
				m := *b.cfg.Metadata
				now := b.now()
				m.LastGitFetchAt = &now
				s := writeStep("record git fetch", b.p.MetadataFile(), 0o644, prettyJSON(m))
				s.IfAllOK = pulls
				b.bg(s)
			}
		}
	}
	if b.cfg.Kind != KindLocal {
		// The image's own services (Docker, Postgres, Redis); on a shared host this
		// script is not ours to run.
		b.bg(Step{Name: "start image services", Kind: StepRun, Requires: "/usr/local/bin/start-services.sh",
			TimeoutMs: StartServicesTimeout.Milliseconds(), Command: "/usr/local/bin/start-services.sh"})
	}
	b.bg(Step{Name: "caddy snippet dir", Kind: StepMkdir, Path: b.p.UserCaddyDir(), Mode: 0o755})
	b.bg(Step{Name: "caddy admin dir", Kind: StepMkdir, Path: b.p.CaddyAdminDir(), Mode: 0o700})
	b.bg(writeStep("caddy snippet", b.p.UserCaddyFile(), 0o644, b.snippet))
	b.bg(writeStep("caddyfile", b.p.Caddyfile(), 0o644, b.caddyfile))
	b.bg(Step{Name: "start caddy", Kind: StepStart, Requires: "caddy", TimeoutMs: BackgroundProcessTimeout.Milliseconds(),
		Command: "exec caddy run --config " + ShellEscape(b.p.Caddyfile()) + " > " + ShellEscape(b.p.CaddyLog()) + " 2>&1"})

	mcp := b.cfg.SandboxMCPCommand
	if mcp == "" {
		mcp = "sandbox-mcp"
	}
	mcpEnv := map[string]string{
		rules.EnvWorkspaceDir: b.p.Workspace(),
		"NODE_ENV":            "production",
		rules.EnvCaddyfile:    b.p.Caddyfile(),
		rules.EnvCaddySnippet: b.p.UserCaddyFile(),
		rules.EnvCaddyAdmin:   "unix/" + b.p.CaddyAdminSocket(),
	}
	if tok := b.opts.EnvVars[EnvSandboxMCPAuthToken]; tok != "" {
		mcpEnv[EnvSandboxMCPAuthToken] = tok
	} else {
		b.warn("no SANDBOX_MCP_AUTH_TOKEN: sandbox-mcp denies every authenticated request")
	}
	for k, v := range b.cfg.SidecarEnv {
		mcpEnv[k] = v
	}
	b.bg(Step{Name: StepNameSandboxMCP, Kind: StepStart, Requires: mcp, Env: mcpEnv,
		TimeoutMs: BackgroundProcessTimeout.Milliseconds(),
		Command:   "exec " + ShellEscape(mcp) + " api > " + ShellEscape(b.p.SandboxMCPLog()) + " 2>&1"})
	if b.cfg.Kind == KindE2B {
		env := map[string]string{"NODE_ENV": "production", "PROLIFERATE_WORKSPACE_ROOT": b.p.Workspace()}
		if tok := b.opts.EnvVars[EnvSandboxMCPAuthToken]; tok != "" {
			env["PROLIFERATE_SESSION_TOKEN"] = tok
		}
		mode := " --mode=worker"
		if b.cfg.SandboxAgent {
			mode = ""
		}
		b.bg(Step{Name: "start sandbox-daemon", Kind: StepStart, Requires: "sandbox-daemon", Env: env,
			TimeoutMs: BackgroundProcessTimeout.Milliseconds(),
			Command:   "exec sandbox-daemon" + mode + " > " + ShellEscape(b.p.SandboxDaemonLog()) + " 2>&1"})
	}
	if b.cfg.SandboxAgent {
		env := b.agentEnv()
		env["HOME"] = b.p.Home
		if b.opts.SessionKind == SessionKindManager {
			env["PROLIFERATE_GATEWAY_URL"] = b.opts.EnvVars["PROLIFERATE_GATEWAY_URL"]
			env["PROLIFERATE_GATEWAY_AUTH_TOKEN"] = b.opts.EnvVars[EnvSandboxMCPAuthToken]
			env["PROLIFERATE_MANAGER_SESSION_ID"] = b.opts.SessionID
		}
		b.bg(Step{Name: "start sandbox-agent", Kind: StepStart, Requires: "sandbox-agent", Env: env,
			TimeoutMs: BackgroundProcessTimeout.Milliseconds(),
			Command: "exec sandbox-agent server --host 0.0.0.0 --port " + strconv.Itoa(PortSandboxAgent) +
				" --no-token > " + ShellEscape(path.Join(b.p.Tmp, "sandbox-agent.log")) + " 2>&1"})
	}
	b.bootServices()
}

func (b *planBuilder) bootServices() {
	for _, w := range b.opts.SecretFileWrites {
		rel, ok := NormalizeSecretPath(w.FilePath)
		if !ok {
			b.warn("secret file %q skipped: not a safe relative path", w.FilePath)
			continue
		}
		s := writeStep("secret file "+rel, path.Join(b.p.Workspace(), rel), 0o600, w.Content)
		s.Secret = true
		b.bg(s)
	}
	if spec := strings.TrimSpace(string(b.opts.EnvFiles)); spec != "" && spec != "null" {
		var v any
		if json.Unmarshal(b.opts.EnvFiles, &v) == nil {
			b.bg(Step{Name: "apply env files", Kind: StepRun, Requires: "proliferate", TimeoutMs: EnvApplyTimeout.Milliseconds(),
				Command: BuildEnvApplyCommand(compactJSON(v))})
		} else {
			b.warn("envFiles skipped: not valid JSON")
		}
	}
	if !b.opts.SnapshotHasDeps {
		return
	}
	for _, c := range b.opts.ServiceCommands {
		cwd := ServiceCwd(b.p, c.WorkspacePath, c.Cwd)
		b.bg(Step{Name: "service " + c.Name, Kind: StepService, Requires: "proliferate",
			TimeoutMs: ServiceStartTimeout.Milliseconds(),
			Command:   BuildServiceStartCommand(c.Name, c.Command, cwd),
			Service:   &ServiceStart{Name: c.Name, Command: c.Command, Cwd: cwd}})
	}
}

// Redacted returns a copy of the plan that is safe to log: every env value and the
// content of secret files become [REDACTED], and commands go through RedactSecrets
// (a token in a clone URL). The plan itself carries the secrets it must write.
func (p Plan) Redacted() Plan {
	redactEnv := func(env map[string]string) map[string]string {
		if env == nil {
			return nil
		}
		out := make(map[string]string, len(env))
		for k := range env {
			out[k] = Redacted
		}
		return out
	}
	var redactSteps func([]Step) []Step
	redactSteps = func(steps []Step) []Step {
		out := make([]Step, len(steps))
		for i, s := range steps {
			s.Env = redactEnv(s.Env)
			s.Command = RedactSecrets(s.Command)
			if s.Git != nil && s.Git.Token != "" {
				g := *s.Git
				g.Token = Redacted
				s.Git = &g
			}
			if s.Secret {
				s.Content = Redacted
			}
			if s.Fallback != nil {
				fb := redactSteps([]Step{*s.Fallback})[0]
				s.Fallback = &fb
			}
			out[i] = s
		}
		return out
	}
	p.Env = redactEnv(p.Env)
	p.Blocking = redactSteps(p.Blocking)
	p.Background = redactSteps(p.Background)
	return p
}
