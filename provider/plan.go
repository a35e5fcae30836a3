package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"time"
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

// Names of the steps providers look at.
const (
	// StepNameSandboxMCP is the step that starts the sandbox-mcp API; the runner
	// waits for its health after it.
	StepNameSandboxMCP = "start sandbox-mcp"
	// StepNameOpenCode is the step that starts OpenCode; a provider waits for it to
	// be ready when it ran.
	StepNameOpenCode = "start opencode"
	// StepNameCaddy is the step that starts Caddy's preview proxy.
	StepNameCaddy = "start caddy"
)

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
	// LLMKeysAsSecrets: the sandbox was created with the LLM keys as Spec.Secrets
	// (LLMSecrets), so the plan gives no step the keys: every command gets the
	// engine's placeholder instead.
	LLMKeysAsSecrets bool
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
	if cfg.LLMKeysAsSecrets {
		if b.env, _, err = LLMSecrets(b.env); err != nil {
			return Plan{}, fmt.Errorf("build plan: %w", err)
		}
	}
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
