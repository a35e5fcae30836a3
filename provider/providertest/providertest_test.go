package providertest_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/providertest"
)

// memory is the smallest provider that keeps the contract: its "cloud" is a map
// shared by every instance, as a real provider's state lives in the cloud.
type memory struct {
	cloud *cloud
}

type cloud struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]map[string]string // id -> env file
}

func (m memory) Kind() provider.Kind                 { return "memory" }
func (m memory) Capabilities() provider.Capabilities { return provider.Capabilities{} }
func (m memory) Health(context.Context) bool         { return true }

func (m memory) EnsureSandbox(ctx context.Context, o provider.CreateOptions) (provider.EnsureResult, error) {
	m.cloud.mu.Lock()
	_, ok := m.cloud.sandboxes[o.CurrentSandboxID]
	m.cloud.mu.Unlock()
	if ok {
		return provider.EnsureResult{CreateResult: provider.CreateResult{SandboxID: o.CurrentSandboxID}, Recovered: true}, nil
	}
	r, err := m.CreateSandbox(ctx, o)
	return provider.EnsureResult{CreateResult: r}, err
}

func (m memory) CreateSandbox(context.Context, provider.CreateOptions) (provider.CreateResult, error) {
	m.cloud.mu.Lock()
	defer m.cloud.mu.Unlock()
	m.cloud.next++
	id := fmt.Sprintf("mem-%d", m.cloud.next)
	m.cloud.sandboxes[id] = map[string]string{}
	return provider.CreateResult{SandboxID: id}, nil
}

func (m memory) Snapshot(_ context.Context, _, id string) (provider.SnapshotResult, error) {
	m.cloud.mu.Lock()
	defer m.cloud.mu.Unlock()
	if _, ok := m.cloud.sandboxes[id]; !ok {
		return provider.SnapshotResult{}, provider.NewProviderError("memory", provider.OpSnapshot, "sandbox not found", false, nil)
	}
	return provider.SnapshotResult{SnapshotID: "snap-" + id}, nil
}

func (m memory) Pause(context.Context, string, string) (provider.SnapshotResult, error) {
	return provider.SnapshotResult{}, provider.PauseUnsupportedError("memory")
}

func (m memory) Terminate(_ context.Context, _, id string) error {
	if id == "" {
		return provider.MissingSandboxIDError("memory")
	}
	m.cloud.mu.Lock()
	defer m.cloud.mu.Unlock()
	delete(m.cloud.sandboxes, id)
	return nil
}

func (m memory) WriteEnvFile(_ context.Context, id string, env map[string]string) error {
	m.cloud.mu.Lock()
	defer m.cloud.mu.Unlock()
	f, ok := m.cloud.sandboxes[id]
	if !ok {
		return provider.NewProviderError("memory", provider.OpWriteEnvFile, "sandbox not found", false, nil)
	}
	for k, v := range env {
		f[k] = v
	}
	return nil
}

func (m memory) CheckSandboxes(_ context.Context, ids []string) ([]string, error) {
	m.cloud.mu.Lock()
	defer m.cloud.mu.Unlock()
	out := []string{}
	for _, id := range ids {
		if _, ok := m.cloud.sandboxes[id]; ok {
			out = append(out, id)
		}
	}
	return out, nil
}

func TestRunAgainstMemoryProvider(t *testing.T) {
	c := &cloud{sandboxes: map[string]map[string]string{}}
	providertest.Run(t, func(t *testing.T) provider.SandboxProvider { return memory{cloud: c} }, providertest.Options{
		Kind:          "memory",
		CreateOptions: func(t *testing.T) provider.CreateOptions { return provider.CreateOptions{SessionID: "s"} },
	})
	if len(c.sandboxes) != 0 {
		t.Errorf("sandboxes left after the suite: %v", c.sandboxes)
	}
}
