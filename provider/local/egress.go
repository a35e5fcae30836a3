package local

// Egress of a sandbox in its own network namespace: the proxy of package egress, served
// by the sandbox's shim (shim.go) on the sandbox's loopback.

import (
	"github.com/proliferate-ai/sandbox-mcp/provider/egress"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// proxyEnv is the environment of every command of a sandbox with egress.
func proxyEnv() map[string]string { return egress.Env(rules.PortEgressProxy) }
