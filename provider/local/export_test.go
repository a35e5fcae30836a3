package local

import "syscall"

// BuiltSandboxMCP exposes the binary built by TestMain to the examples.
func BuiltSandboxMCP() string { return sandboxMCP }

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
