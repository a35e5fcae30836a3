// Package coderun is code execution for models: run_code evaluates TypeScript with
// Deno inside a sandbox of any engine (provider/engine) against preinstalled npm
// SDKs, search_docs searches those SDKs' docs and the session's saved code modules
// (provider/docsearch), and save_code_modules indexes modules the model saved in the
// session's volume.
//
// The pieces:
//   - Config is the platform's `[sandbox]` TOML section; off means no tools.
//   - EnsureSnapshot builds the dependency snapshot deps-<configHash> once (Deno from
//     the npm package `deno`, `deno install` of the packages, engine.Snapshot) and
//     reuses it while the dependency set is unchanged.
//   - A Session boots a sandbox from that snapshot (lazily or warm), mounts its volume
//     at /workspace and keeps a Deno REPL server running in it; the REPL keeps
//     variables between calls. Deno's permission flags are a second wall inside the
//     sandbox: network only to the configured hosts, environment only the secrets,
//     files only /workspace and the dependency directory, no subprocesses or FFI.
//     A secret never enters the sandbox: the session's sandbox gets it as
//     engine.Spec.Secrets, so its variable holds the engine's placeholder, which the
//     engine's egress proxy swaps for the value on requests to the secret's hosts.
//   - Cleanup deletes volumes unused for the configured TTL.
//
// cmd/sandboxctl (`sandboxctl code …`) wires it to an engine, as a CLI and as an MCP
// server over stdio (MCPServer).
package coderun
