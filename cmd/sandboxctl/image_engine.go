package main

import (
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// newBuildRunner makes the build sandbox of `image build`'s run and apt steps: a
// local-engine sandbox booted from the store's images, ids mapped like every
// user-namespaced sandbox. The close ends the engine.
func newBuildRunner(a *Factory, s *store.Store) (build.Runner, func(), error) {
	e, err := local.NewEngine(local.EngineOptions{DataDir: a.dataDir, Images: s, Logger: a.logger()})
	if err != nil {
		return nil, nil, err
	}
	r := build.EngineRunner{Engine: e, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}
	return r, func() { _ = e.Close() }, nil
}
