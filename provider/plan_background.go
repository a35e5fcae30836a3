package provider

import (
	"encoding/json"
	"path"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

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
	b.bg(Step{Name: StepNameCaddy, Kind: StepStart, Requires: "caddy", TimeoutMs: BackgroundProcessTimeout.Milliseconds(),
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
		env := map[string]string{"NODE_ENV": "production", rules.EnvWorkspaceRoot: b.p.Workspace()}
		if tok := b.opts.EnvVars[EnvSandboxMCPAuthToken]; tok != "" {
			env[rules.EnvSessionToken] = tok
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
			env[rules.EnvGatewayURL] = b.opts.EnvVars[rules.EnvGatewayURL]
			env[rules.EnvGatewayAuthToken] = b.opts.EnvVars[EnvSandboxMCPAuthToken]
			env[rules.EnvManagerSessionID] = b.opts.SessionID
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
		// No Requires: the runner starts it through sandbox-mcp's API, which the
		// step needs up, not the CLI.
		b.bg(Step{Name: "service " + c.Name, Kind: StepService,
			TimeoutMs: ServiceStartTimeout.Milliseconds(),
			Command:   BuildServiceStartCommand(c.Name, c.Command, cwd),
			Service:   &ServiceStart{Name: c.Name, Command: c.Command, Cwd: cwd}})
	}
}
