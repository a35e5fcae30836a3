package local

import (
	"context"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine/enginetest"
)

// withRuntime is the engine with every Create under one runtime.
type withRuntime struct {
	*Engine
	runtime string
}

func (w withRuntime) Create(ctx context.Context, spec engine.Spec) (engine.Info, error) {
	spec.Runtime = w.runtime
	return w.Engine.Create(ctx, spec)
}

// TestEngineContract runs the engine contract suite on the isolated local engine,
// once per runtime it offers. (The unisolated engine is left out: its sandboxes'
// paths are the host's.)
func TestEngineContract(t *testing.T) {
	e := newTestEngine(t)
	for _, rt := range e.Capabilities().Runtimes {
		t.Run(rt, func(t *testing.T) {
			enginetest.Run(t, func(t *testing.T) engine.Engine { return withRuntime{e, rt} })
		})
	}
}
