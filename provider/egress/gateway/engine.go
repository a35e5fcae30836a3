package gateway

// What an engine adapter (provider/modal, provider/e2b) does with Spec.Secrets when
// its sandboxes reach the internet without our proxy, in one place for both (Create
// and Terminate around the adapter's own): without a gateway it refuses them (never
// degrading them to environment variables); with one it registers the sandbox before
// it is created, for the sandbox's Timeout and rules.GatewayGrace (Prepare), binds
// the registration to the sandbox's id and writes the trust into it after
// (Registrar.Bind, Trust), and ends the credential at terminate, by the sandbox's
// label or, when the engine no longer reports it, by its id.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// LabelKey is the sandbox label that holds its registration's id.
const LabelKey = "egress-gateway"

// Engine is where an adapter's sandboxes reach a gateway.
type Engine struct {
	// Registrar registers the sandboxes.
	Registrar Registrar
	// Addr is the gateway's proxy as the sandboxes reach it (host:port).
	Addr string
}

// Refuse is the error of an adapter without a gateway for a spec with secrets; nil
// without secrets.
func Refuse(engineName string, spec engine.Spec) error {
	if len(spec.Secrets) == 0 {
		return nil
	}
	return fmt.Errorf("%s: Spec.Secrets: its sandboxes reach the internet without our egress proxy; configure an egress gateway (sandboxctl gateway): %w", engineName, engine.ErrUnsupported)
}

// Lifetime is the credential's lifetime of a sandbox that lives timeout: timeout and
// rules.GatewayGrace; zero (none) for a sandbox without one.
func Lifetime(timeout time.Duration) time.Duration {
	if timeout <= 0 {
		return 0
	}
	return timeout + rules.GatewayGrace
}

// Prepare registers spec's secrets, for Lifetime(spec.Timeout) (an adapter puts its
// engine's default timeout in spec first), and returns the spec to create: the placeholders,
// the proxy's and the trust's environment added, the registration's id labeled, and
// the gateway's host allowed egress (added to EgressHosts when it is a list, unless
// it is a loopback address). Without secrets it returns spec as it is.
func (g *Engine) Prepare(ctx context.Context, spec engine.Spec) (engine.Spec, Registration, error) {
	if len(spec.Secrets) == 0 {
		return spec, Registration{}, nil
	}
	if g == nil || g.Registrar == nil || g.Addr == "" {
		return spec, Registration{}, errors.New("egress gateway: a registrar and an address are required")
	}
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return spec, Registration{}, err
	}
	key := "sb-" + hex.EncodeToString(b[:])
	reg, err := g.Registrar.Register(ctx, key, spec.Secrets, Lifetime(spec.Timeout))
	if err != nil {
		return spec, Registration{}, err
	}
	spec.Env = append(append(append(slices.Clip(spec.Env), reg.Env...), ProxyEnv(g.Addr, reg.Credential)...), rules.TrustEnv()...)
	spec.Labels = maps.Clone(spec.Labels)
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[LabelKey] = key
	if len(spec.EgressHosts) > 0 {
		// A loopback address is a relay inside the sandbox (the local servers' way to
		// the gateway: gatewaytest), not a destination; its own is the caller's to allow.
		if host, _, err := net.SplitHostPort(g.Addr); err == nil && !isLoopback(host) {
			spec.EgressHosts = append(slices.Clip(spec.EgressHosts), host)
		}
	}
	spec.Egress = true
	spec.Secrets = nil
	return spec, reg, nil
}

func isLoopback(host string) bool {
	a, err := netip.ParseAddr(host)
	return host == "localhost" || (err == nil && a.IsLoopback())
}

// Trust writes reg's authority into sandbox id: the copies its environment names
// (rules.TrustEnv: the authority alone and the system bundle with it, in the user's
// rules.TrustUserDir), then the system's files where the engine may write them (E2B's
// file calls run as the sandbox's user, who may not: the environment holds anyway).
func Trust(ctx context.Context, e engine.Engine, id string, reg Registration) error {
	if len(reg.TrustPEM) == 0 {
		return nil
	}
	bundle, _ := e.ReadFile(ctx, id, rules.TrustBundleFile)
	bundle = append(append(bundle, '\n'), reg.TrustPEM...)
	if err := e.MkdirAll(ctx, id, rules.TrustUserDir); err != nil {
		return fmt.Errorf("make %s in sandbox %s for the egress authority: %w", rules.TrustUserDir, id, err)
	}
	for _, f := range []struct {
		path string
		data []byte
	}{{rules.TrustUserCAFile, reg.TrustPEM}, {rules.TrustUserBundleFile, bundle}} {
		if err := e.WriteFile(ctx, id, f.path, f.data, 0o644); err != nil {
			return fmt.Errorf("write the egress authority to %s in sandbox %s: %w", f.path, id, err)
		}
	}
	// Best effort: programs that read only the system's roots trust it too.
	if e.WriteFile(ctx, id, rules.TrustCAFile, reg.TrustPEM, 0o644) == nil {
		_ = e.WriteFile(ctx, id, rules.TrustBundleFile, bundle, 0o644)
	}
	return nil
}

// Create is an adapter's Create with the gateway's part around it. Without a gateway
// (g nil), a spec with secrets is refused (Refuse, naming engineName). With one, the
// secrets are registered (Prepare), create makes the sandbox of the prepared spec and
// returns its id, the registration is bound to the id (Registrar.Bind) and the trust
// written into it (Trust); a failure after Prepare ends the registration again, and
// the sandbox too (e.Terminate) once it exists.
func (g *Engine) Create(ctx context.Context, e engine.Engine, engineName string, spec engine.Spec,
	create func(context.Context, engine.Spec) (string, error)) (string, error) {
	if g == nil {
		if err := Refuse(engineName, spec); err != nil {
			return "", err
		}
		return create(ctx, spec)
	}
	spec, reg, err := g.Prepare(ctx, spec)
	if err != nil {
		return "", err
	}
	id, err := create(ctx, spec)
	if err == nil && reg.Credential != "" {
		// Bound first: the engine's file calls of Trust may lengthen the sandbox's
		// life (Extend), which reaches the credential through the binding.
		if err = g.Registrar.Bind(ctx, spec.Labels[LabelKey], id); err == nil {
			err = Trust(ctx, e, id, reg)
		}
		if err != nil {
			_ = e.Terminate(context.WithoutCancel(ctx), id)
		}
	}
	if err != nil {
		_ = g.Release(context.WithoutCancel(ctx), spec.Labels)
		return "", err
	}
	return id, nil
}

// Terminate is an adapter's Terminate with the gateway's part around it: the
// sandbox's labels are read (e.Get) before terminate ends it, and its credential
// ends after, whatever terminate returned: by the label's registration, or by the
// sandbox's id (Registrar.UnregisterSandbox) when Get fails or reports no label (a
// sandbox that ended on its own). Without a gateway (g nil) it is terminate.
func (g *Engine) Terminate(ctx context.Context, e engine.Engine, id string, terminate func(context.Context, string) error) error {
	if g == nil {
		return terminate(ctx, id)
	}
	info, gerr := e.Get(ctx, id)
	err := terminate(ctx, id)
	ctx = context.WithoutCancel(ctx)
	switch {
	case g.Registrar == nil:
	case gerr == nil && info.Labels[LabelKey] != "":
		_ = g.Release(ctx, info.Labels)
	default:
		_ = g.Registrar.UnregisterSandbox(ctx, id)
	}
	return err
}

// Extend tells the gateway that the engine lengthened sandbox id's life to at least
// timeout from now (zero: its lifetime stands still, as a paused sandbox's), so its
// credential lives as long (Lifetime). Without a gateway, or for a sandbox without
// secrets, it does nothing.
func (g *Engine) Extend(ctx context.Context, id string, timeout time.Duration) error {
	if g == nil || g.Registrar == nil {
		return nil
	}
	return g.Registrar.Extend(ctx, id, Lifetime(timeout))
}

// Release ends the credential of a sandbox created with Prepare (its labels).
func (g *Engine) Release(ctx context.Context, labels map[string]string) error {
	if g == nil || g.Registrar == nil || labels[LabelKey] == "" {
		return nil
	}
	return g.Registrar.Unregister(ctx, labels[LabelKey])
}
