package local

import "github.com/proliferate-ai/sandbox-mcp/provider/engine"

var _ engine.HostBinder = (*Engine)(nil)

// BindsHostPaths: an isolated sandbox gets Spec.Mounts bound in; one without
// isolation sees the host's paths as they are and needs none.
func (e *Engine) BindsHostPaths() bool { return e.caps.Isolated }
