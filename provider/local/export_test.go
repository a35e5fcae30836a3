package local

// BuiltSandboxMCP exposes the binary built by TestMain to the examples.
func BuiltSandboxMCP() string { return sandboxMCP }
