package modal

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// testProvider is the one provider (provider.New) over this package's engine, as
// sandboxctl drives Modal.
type testProvider struct {
	*provider.Provider
	eng *Engine
}

// Engine is the Modal engine under the provider.
func (p *testProvider) Engine() *Engine { return p.eng }

// newTestProvider is the provider over an engine of o; mirrors may be nil.
func newTestProvider(t testing.TB, o Options, mirrors provider.GitBundler) *testProvider {
	t.Helper()
	eng := NewEngine(o)
	t.Cleanup(func() { eng.Close() })
	p, err := provider.New(eng, provider.Options{Kind: provider.KindModal, Getenv: o.Getenv, ReadyWait: time.Second,
		GitMirrors: mirrors, Timeout: provider.SandboxTimeout(o.Getenv)})
	if err != nil {
		t.Fatal(err)
	}
	return &testProvider{Provider: p, eng: eng}
}

func newProvider(t testing.TB, env map[string]string) *testProvider {
	return newTestProvider(t, Options{Getenv: func(k string) string { return env[k] }}, nil)
}

// execOut runs argv in the sandbox through the engine and returns its combined
// output.
func execOut(ctx context.Context, e engine.Engine, id string, argv []string) (string, error) {
	var out bytes.Buffer
	_, err := e.Exec(ctx, id, engine.ExecRequest{Argv: argv, Stdout: &out, Stderr: &out, Timeout: time.Minute})
	return out.String(), err
}

// run execs argv through the SDK and returns its output and exit code.
func run(ctx context.Context, sb *modalsdk.Sandbox, argv []string, params *modalsdk.SandboxExecParams) (provider.ExecResult, error) {
	proc, err := sb.Exec(ctx, argv, params)
	if err != nil {
		return provider.ExecResult{}, err
	}
	var stdout, stderr []byte
	var wg sync.WaitGroup
	var errOut error
	wg.Add(1)
	go func() {
		defer wg.Done()
		stderr, errOut = io.ReadAll(proc.Stderr)
	}()
	stdout, err = io.ReadAll(proc.Stdout)
	wg.Wait()
	if err == nil {
		err = errOut
	}
	if err != nil {
		return provider.ExecResult{}, err
	}
	code, err := proc.Wait(ctx, nil)
	if err != nil {
		return provider.ExecResult{}, err
	}
	return provider.ExecResult{Stdout: string(stdout), Stderr: string(stderr), ExitCode: code}, nil
}
