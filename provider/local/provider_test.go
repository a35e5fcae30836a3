package local

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/gitpush"
)

// The boot tests of this package run the one provider (provider.New) on the local
// engine, as sandboxctl does: testProvider is that pair, with the spec every boot of a
// test asks for.

// testOptions configure newTestProvider.
type testOptions struct {
	Root, SandboxMCP, Proliferate string
	Unisolated                    bool
	Getenv                        func(string) string
	Images                        engine.ImageResolver
	// Image is the image every Boot asks for, unless the call brings a spec of its own.
	Image string
}

// testProvider is the provider over a local engine on Root.
type testProvider struct {
	*provider.Provider
	eng *Engine
	o   testOptions
}

// testBoot is a provider.Boot with the host path of the sandbox's home.
type testBoot struct {
	provider.Boot
	Home string
}

func newTestProvider(o testOptions) (*testProvider, error) {
	eng, err := NewEngine(EngineOptions{DataDir: o.Root, Unisolated: o.Unisolated, SandboxMCP: o.SandboxMCP,
		Proliferate: o.Proliferate, Images: o.Images})
	if err != nil {
		return nil, err
	}
	mirrors, err := gitpush.New(gitpush.Options{CacheDir: filepath.Join(o.Root, "git-mirrors")})
	if err != nil {
		eng.Close()
		return nil, err
	}
	po := provider.Options{Kind: provider.KindLocal, Getenv: o.Getenv, GitMirrors: mirrors}
	if o.Unisolated {
		po.SandboxMCPCommand = o.SandboxMCP
	}
	p, err := provider.New(eng, po)
	if err != nil {
		eng.Close()
		return nil, err
	}
	return &testProvider{Provider: p, eng: eng, o: o}, nil
}

// Engine is the local engine under the provider.
func (p *testProvider) Engine() *Engine { return p.eng }

// Close closes the engine; sandboxes keep running.
func (p *testProvider) Close() error { return p.eng.Close() }

// Boot boots with the test's spec.
func (p *testProvider) Boot(ctx context.Context, opts provider.CreateOptions) (testBoot, error) {
	if opts.Spec.Image == "" && opts.Spec.Limits == (engine.Limits{}) && len(opts.Spec.Volumes) == 0 {
		opts.Spec.Image = p.o.Image
	}
	b, err := p.Provider.Boot(ctx, opts)
	return testBoot{Boot: b, Home: b.Info.Home}, err
}

// mustNew is newTestProvider for tests: where namespaces are not permitted the test is
// skipped (the unisolated tests still run there).
func mustNew(t testing.TB, o testOptions) *testProvider {
	t.Helper()
	p, err := newTestProvider(o)
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newProvider(t *testing.T, env map[string]string) *testProvider {
	t.Helper()
	p := mustNew(t, testOptions{Root: t.TempDir(), SandboxMCP: sandboxMCP, Getenv: func(k string) string { return env[k] }})
	t.Cleanup(func() { p.Close() })
	return p
}
