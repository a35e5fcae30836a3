package provider

// PluginMJS is the OpenCode plugin written to Paths.PluginFile. It only logs that it
// loaded; the platform talks to OpenCode over SSE. It is an input of
// ComputeBaseSnapshotVersionKey, so any change here asks for a new base snapshot.
const PluginMJS = `// Proliferate plugin for OpenCode (SSE mode: the platform reads events over HTTP).
console.log("[Proliferate] Plugin loaded (SSE mode)");

export const ProliferatePlugin = async ({ project, directory }) => {
  console.log("[Proliferate] Plugin initialized");
  console.log("[Proliferate] Project:", project?.name ?? "unknown");
  console.log("[Proliferate] Directory:", directory);
  return {};
};
`

// DefaultSystemPrompt starts instructions.md when CreateOptions.SystemPrompt is empty.
const DefaultSystemPrompt = "You are a senior engineer working on this codebase."

// EnvInstructions is appended to the system prompt in instructions.md.
const EnvInstructions = `## Environment Information

**You are running in a cloud sandbox with full Docker support.**

### Available Tools
- **Node.js 20** with pnpm (preferred) and yarn
- **Python 3.11** with uv (preferred) and pip
- **Docker & Docker Compose**

### How to Set Up Projects

**Option 1: Docker Compose** (when the project has a compose file)
` + "```bash" + `
docker compose up -d
` + "```" + `

**Option 2: Run services directly**

Python (FastAPI):
` + "```bash" + `
uv sync
uv run uvicorn main:app --host 0.0.0.0 --port 8000
` + "```" + `

Node.js:
` + "```bash" + `
pnpm install
pnpm dev --host 0.0.0.0
` + "```" + `
`

// ActionsBootstrap is written to <repoDir>/.proliferate/actions-guide.md.
const ActionsBootstrap = `# Proliferate Platform Guide

Use the platform's integrations to act on the user's behalf (issues, messages,
monitoring) instead of asking the user to do it.

## Quick Start

` + "```bash" + `
proliferate actions list
proliferate actions guide --integration <name>
proliferate actions run --integration <name> --action <action> --params '<json>'
` + "```" + `

## How It Works

- Read actions are approved automatically.
- Write actions need the user's approval; the command blocks until it is approved or denied.
- Danger actions are denied by default.
- Tokens are resolved on the server: never ask the user for API keys.

## Local CLI

Outside the sandbox the same commands run with ` + "`npx @proliferate/cli`" + `.
`
