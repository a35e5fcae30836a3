package provider

import (
	"encoding/json"
	"path"
	"strconv"
)

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
	// Required: the tools' package.json, not their folder, which an image may make
	// empty (image.Default does): the copy would fail there.
	b.block(Step{Name: "copy tool dependencies", Kind: StepRun, Requires: tools + "/package.json", TimeoutMs: ToolsCopyTimeout.Milliseconds(),
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
	b.block(Step{Name: StepNameOpenCode, Kind: StepStart, Requires: "opencode", Env: b.agentEnv(),
		TimeoutMs: BackgroundProcessTimeout.Milliseconds(),
		Command: "cd " + ShellEscape(repoDir) + " && exec opencode serve --print-logs --log-level ERROR --port " +
			strconv.Itoa(PortOpenCode) + " --hostname 0.0.0.0 > " + ShellEscape(b.p.OpenCodeLog()) + " 2>&1"})
}

// agentEnv is the environment of the process that runs the agent: the proxy key and
// URL in proxy mode, else the direct key. A key that travels as a secret is left out:
// the engine gives every command its placeholder.
func (b *planBuilder) agentEnv() map[string]string {
	env := map[string]string{EnvSessionID: b.opts.SessionID, EnvDisableDefaultPlugins: "true"}
	switch {
	case b.env.ProxyMode():
		if !b.env.KeysAsSecrets {
			env[EnvAnthropicAPIKey] = b.env.ProxyAPIKey
		}
		env[EnvAnthropicBaseURL] = b.env.ProxyBaseURL
	case b.opts.EnvVars[EnvAnthropicAPIKey] != "":
		if !b.env.KeysAsSecrets {
			env[EnvAnthropicAPIKey] = b.opts.EnvVars[EnvAnthropicAPIKey]
		}
	default:
		b.warn("no LLM credentials: the agent starts without ANTHROPIC_API_KEY")
	}
	return env
}
