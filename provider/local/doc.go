// Package local is the engine (engine.Engine) that runs sandboxes on this machine:
// each sandbox lives in its own Linux namespaces with the production layout inside.
// The one provider (provider.New) boots the platform's sandboxes on it: local
// repositories (paths and file:// URLs) are bound read-only into the sandbox at the
// same path (engine.HostBinder), and sandbox-mcp listens on its production port 4000,
// reached through a tunnel.
//
// It exists so the host-side logic of package provider can be run end to end without
// a cloud account, by tests, examples, developers and sandboxctl.
package local

import (
	"io/fs"
	"os"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/rules/atomicfile"
)

// writeFileAtomic writes data to path through a temp file and a rename, creating the
// parent directories.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, data, mode)
}
