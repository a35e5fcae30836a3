// Package provider is the host-side logic of a sandbox provider: the code that runs
// outside the sandbox and decides how it boots. It holds the constants of the sandbox
// layout, the pure helpers (shell quoting, output capping, secret redaction, service
// command validation, git credential maps, snapshot layer resolution, env files, the
// OpenCode config and model ids), a boot plan builder that turns CreateOptions into an
// ordered, inspectable list of steps, the one plan runner, the SandboxProvider
// interface with its factory, and the one SandboxProvider: Provider (New), written once
// over the engine contract (provider/engine).
//
// A Go gateway imports it to drive a sandbox platform: New over the engine of that
// platform (provider/local on this machine, provider/modal, provider/e2b). Everything a
// create asks for one sandbox travels with that call (CreateOptions.Spec); the engines
// differ only in what they say they can do. provider/providertest is the contract suite
// of a SandboxProvider. The package keeps no global mutable state: clocks, environment
// lookups and engines are passed in.
package provider
