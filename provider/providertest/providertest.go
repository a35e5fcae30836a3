// Package providertest is the contract suite every provider.SandboxProvider runs:
// interface and capability checks, error shapes, side-effect-free liveness checks,
// and (when the implementation can boot sandboxes in tests) the lifecycle of create,
// recover, snapshot and an idempotent terminate.
package providertest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// Options configure Run.
type Options struct {
	// Kind is the provider kind the implementation must report.
	Kind provider.Kind
	// CreateOptions returns the options of a sandbox the lifecycle tests boot; nil
	// skips the lifecycle tests (for providers that need a cloud account).
	CreateOptions func(t *testing.T) provider.CreateOptions
	// Timeout bounds each lifecycle call; zero means 2 minutes.
	Timeout time.Duration
}

// Run runs the contract suite against the provider newProvider returns. A fresh
// provider is made for every subtest: providers must keep their state in the sandbox.
func Run(t *testing.T, newProvider func(t *testing.T) provider.SandboxProvider, o Options) {
	if o.Timeout <= 0 {
		o.Timeout = 2 * time.Minute
	}
	t.Run("Kind", func(t *testing.T) {
		if got := newProvider(t).Kind(); got != o.Kind {
			t.Errorf("Kind() = %q, want %q", got, o.Kind)
		}
	})
	t.Run("TerminateRequiresSandboxID", func(t *testing.T) {
		err := newProvider(t).Terminate(t.Context(), "session-123", "")
		wantProviderError(t, err, provider.OpTerminate, "sandboxId is required")
	})
	t.Run("HealthNeverFails", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		_ = newProvider(t).Health(ctx) // must return, true or false, without panicking
	})
	t.Run("PauseMatchesCapability", func(t *testing.T) {
		p := newProvider(t)
		if p.Capabilities().SupportsPause {
			t.Skip("provider supports pause")
		}
		_, err := p.Pause(t.Context(), "session-123", "sandbox-123")
		wantProviderError(t, err, provider.OpPause, "not supported")
	})
	t.Run("CheckSandboxesEmpty", func(t *testing.T) {
		c, ok := newProvider(t).(provider.SandboxChecker)
		if !ok {
			t.Skip("provider has no CheckSandboxes")
		}
		got, err := c.CheckSandboxes(t.Context(), nil)
		if err != nil || len(got) != 0 {
			t.Errorf("CheckSandboxes(nil) = %q, %v, want [], nil", got, err)
		}
		got, err = c.CheckSandboxes(t.Context(), []string{"no-such-sandbox"})
		if err != nil || len(got) != 0 {
			t.Errorf("CheckSandboxes(unknown) = %q, %v, want [], nil", got, err)
		}
	})
	t.Run("SnapshotUnknownIsProviderError", func(t *testing.T) {
		_, err := newProvider(t).Snapshot(t.Context(), "session-123", "no-such-sandbox")
		if !provider.IsProviderError(err) {
			t.Errorf("Snapshot(unknown) = %v, want a *provider.ProviderError", err)
		}
	})
	t.Run("TerminateUnknownSucceeds", func(t *testing.T) {
		if err := newProvider(t).Terminate(t.Context(), "session-123", "no-such-sandbox"); err != nil {
			t.Errorf("Terminate(unknown) = %v, want nil", err)
		}
	})
	if o.CreateOptions == nil {
		return
	}
	t.Run("Lifecycle", func(t *testing.T) { lifecycle(t, newProvider, o) })
}

func wantProviderError(t *testing.T, err error, op provider.Operation, msg string) {
	t.Helper()
	var pe *provider.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v (%T), want a *provider.ProviderError", err, err)
	}
	if pe.Operation != op || pe.Retryable || !strings.Contains(pe.Error(), msg) {
		t.Errorf("err = %q (op %s, retryable %v), want op %s, not retryable, containing %q", pe, pe.Operation, pe.Retryable, op, msg)
	}
}

func lifecycle(t *testing.T, newProvider func(t *testing.T) provider.SandboxProvider, o Options) {
	ctx, cancel := context.WithTimeout(t.Context(), o.Timeout)
	defer cancel()
	opts := o.CreateOptions(t)
	p := newProvider(t)
	checker, _ := p.(provider.SandboxChecker)
	alive := func(id string) bool {
		if checker == nil {
			return true
		}
		got, err := checker.CheckSandboxes(ctx, []string{"no-such-sandbox", id})
		if err != nil {
			t.Fatalf("CheckSandboxes: %v", err)
		}
		return slices.Equal(got, []string{id})
	}

	first, err := p.EnsureSandbox(ctx, opts)
	if err != nil {
		t.Fatalf("EnsureSandbox (create): %v", err)
	}
	t.Cleanup(func() { _ = newProvider(t).Terminate(context.Background(), opts.SessionID, first.SandboxID) })
	if first.SandboxID == "" || first.Recovered {
		t.Fatalf("EnsureSandbox (create) = %+v, want a new sandbox", first)
	}
	if !alive(first.SandboxID) {
		t.Errorf("CheckSandboxes does not list the new sandbox %s", first.SandboxID)
	}

	recovered := opts
	recovered.CurrentSandboxID = first.SandboxID
	again, err := newProvider(t).EnsureSandbox(ctx, recovered)
	if err != nil {
		t.Fatalf("EnsureSandbox (recover): %v", err)
	}
	if !again.Recovered || again.SandboxID != first.SandboxID {
		t.Errorf("EnsureSandbox (recover) = %+v, want sandbox %s recovered", again, first.SandboxID)
	}

	if err := p.WriteEnvFile(ctx, first.SandboxID, map[string]string{"CONTRACT_KEY": "1"}); err != nil {
		t.Errorf("WriteEnvFile: %v", err)
	}
	snap, err := p.Snapshot(ctx, opts.SessionID, first.SandboxID)
	if err != nil || snap.SnapshotID == "" {
		t.Errorf("Snapshot = %+v, %v, want an id", snap, err)
	}

	if err := p.Terminate(ctx, opts.SessionID, first.SandboxID); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	if err := newProvider(t).Terminate(ctx, opts.SessionID, first.SandboxID); err != nil {
		t.Errorf("Terminate again = %v, want nil (idempotent)", err)
	}
	if checker != nil && alive(first.SandboxID) {
		t.Errorf("CheckSandboxes still lists terminated sandbox %s", first.SandboxID)
	}

	// Ensure recovers from a dead sandbox by creating a new one.
	fresh, err := newProvider(t).EnsureSandbox(ctx, recovered)
	if err != nil {
		t.Fatalf("EnsureSandbox (after terminate): %v", err)
	}
	t.Cleanup(func() { _ = newProvider(t).Terminate(context.Background(), opts.SessionID, fresh.SandboxID) })
	if fresh.Recovered || fresh.SandboxID == "" || fresh.SandboxID == first.SandboxID {
		t.Errorf("EnsureSandbox (after terminate) = %+v, want a new sandbox", fresh)
	}
	if err := p.Terminate(ctx, opts.SessionID, fresh.SandboxID); err != nil {
		t.Errorf("Terminate: %v", err)
	}
	if err := p.Terminate(ctx, opts.SessionID, first.SandboxID); err != nil {
		t.Errorf("Terminate of a long gone sandbox = %v, want nil", err)
	}
	if err := p.WriteEnvFile(ctx, first.SandboxID, map[string]string{"A": "1"}); !provider.IsProviderError(err) {
		t.Errorf("WriteEnvFile on a terminated sandbox = %v, want a *provider.ProviderError", err)
	}
}
