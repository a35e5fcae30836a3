// Package provider is the host-side logic of a sandbox provider: the code that runs
// outside the sandbox and decides how it boots. It holds the constants of the sandbox
// layout, the pure helpers (shell quoting, output capping, secret redaction, service
// command validation, git credential maps, snapshot layer resolution, env files, the
// OpenCode config and model ids), a boot plan builder that turns CreateOptions into an
// ordered, inspectable list of steps, and the SandboxProvider interface with its factory.
//
// A Go gateway imports it to drive a cloud provider; provider/local executes a boot plan
// on this machine and provider/providertest is the contract suite every implementation
// runs. The package uses the standard library only and keeps no global mutable state:
// clocks, environment lookups and command execution are passed in.
package provider
