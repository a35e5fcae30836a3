package provider

import "strings"

// Tool is an OpenCode custom tool written to <repoDir>/.opencode/tool: its source
// (<name>.ts) and its description (<name>.txt).
type Tool struct {
	Name        string
	Description string
	// Args is the JavaScript object literal of the tool's argument schema, written
	// with the plugin's `tool.schema` (zod).
	Args string
	// SetupOnly tools exist only in setup sessions.
	SetupOnly bool
}

// Tools are the OpenCode tools of a session. Each one forwards its call to the
// gateway; the gateway owns what the arguments mean.
func Tools() []Tool {
	return []Tool{
		{Name: "verify", Description: "Upload verification evidence (screenshots, logs, test output) from a folder so the user can review the result. Default folder: .proliferate/.verification/",
			Args: `{ folder: tool.schema.string().optional().describe("Folder with the evidence, relative to the repo (default .proliferate/.verification/)") }`},
		{Name: "save_snapshot", Description: "Save a snapshot of the sandbox so the next session starts from the current state (installed dependencies, built assets).",
			Args: `{ message: tool.schema.string().optional().describe("What the snapshot contains") }`},
		{Name: "automation_complete", Description: "Report that the automation run is finished, with a summary of what was done.",
			Args: `{ summary: tool.schema.string().describe("What was done"), success: tool.schema.boolean().optional().describe("Whether the run succeeded") }`},
		{Name: "request_env_variables", Description: "Ask the user for environment variables (API keys, secrets) the project needs; the values are written to the sandbox, never shown to the agent.",
			Args: `{ keys: tool.schema.array(tool.schema.string()).describe("Variable names"), reason: tool.schema.string().optional().describe("Why they are needed") }`},
		{Name: "save_service_commands", SetupOnly: true, Description: "Save the commands that start this project's services (dev servers, watchers) so future sessions start them automatically.",
			Args: `{ commands: tool.schema.array(tool.schema.object({ name: tool.schema.string(), command: tool.schema.string(), cwd: tool.schema.string().optional(), workspacePath: tool.schema.string().optional() })).describe("At most 10 commands") }`},
		{Name: "save_env_files", SetupOnly: true, Description: "Save which env files the project needs and which keys they hold, so future sessions get them written.",
			Args: `{ files: tool.schema.array(tool.schema.object({ path: tool.schema.string(), workspacePath: tool.schema.string().optional(), keys: tool.schema.array(tool.schema.string()) })).describe("Env files") }`},
	}
}

// ToolSource is the TypeScript source of t. The call goes to
// <PROLIFERATE_GATEWAY_URL>/proliferate/<PROLIFERATE_SESSION_ID>/tools/<name> with the
// sandbox token, 120s per attempt, retried up to 5 times (after 0.5s, 1s, 2s, 4s, 8s) on
// connection failures with the same tool_call_id, so the gateway can answer a retry
// from its cache. The source is also valid JavaScript.
func ToolSource(t Tool) string {
	return strings.NewReplacer("__NAME__", t.Name, "__ARGS__", t.Args, "__DESCRIPTION__", jsString(t.Description)).Replace(toolTemplate)
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

const toolTemplate = `// Proliferate tool "__NAME__": forwards the call to the platform gateway.
import { tool } from "@opencode-ai/plugin";
import { randomUUID } from "node:crypto";

const RETRYABLE = ["ECONNRESET", "ECONNREFUSED", "fetch failed", "AbortError"];

async function callGateway(name, args, callID) {
  const base = (process.env.PROLIFERATE_GATEWAY_URL || "").replace(/\/+$/, "");
  const session = process.env.PROLIFERATE_SESSION_ID || process.env.SESSION_ID || "";
  if (!base || !session) {
    return "Error: PROLIFERATE_GATEWAY_URL and PROLIFERATE_SESSION_ID must be set";
  }
  const url = base + "/proliferate/" + encodeURIComponent(session) + "/tools/" + name;
  const body = JSON.stringify({ tool_call_id: callID, args });
  let lastError;
  for (let attempt = 0; attempt <= 5; attempt++) {
    if (attempt > 0) await new Promise((r) => setTimeout(r, 500 * 2 ** (attempt - 1)));
    try {
      const res = await fetch(url, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          Authorization: "Bearer " + (process.env.SANDBOX_MCP_AUTH_TOKEN || ""),
        },
        body,
        signal: AbortSignal.timeout(120000),
      });
      const text = await res.text();
      if (!res.ok) return "Error: HTTP " + res.status + ": " + text;
      try {
        const data = JSON.parse(text);
        return typeof data.result === "string" ? data.result : JSON.stringify(data.result ?? data);
      } catch {
        return text;
      }
    } catch (err) {
      lastError = err;
      const msg = String((err && (err.name + " " + err.message + " " + (err.cause && err.cause.code))) || err);
      if (!RETRYABLE.some((m) => msg.includes(m))) break;
    }
  }
  return "Error: " + String((lastError && lastError.message) || lastError);
}

export default tool({
  description: __DESCRIPTION__,
  args: __ARGS__,
  async execute(args, context) {
    return callGateway("__NAME__", args, (context && context.callID) || randomUUID());
  },
});
`
