package gateway

// What an engine adapter (provider/modal, provider/e2b) does with Spec.Secrets when
// its sandboxes reach the internet without our proxy: without a gateway it refuses
// them (never degrading them to environment variables); with one it registers the
// sandbox before Create (Prepare), writes the trust into it after (Trust), and ends
// the credential at Terminate (Release).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"

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

// Prepare registers spec's secrets and returns the spec to create: the placeholders,
// the proxy's and the trust's environment added, the registration's id labeled, and
// the gateway's host allowed egress. Without secrets it returns spec as it is.
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
	reg, err := g.Registrar.Register(ctx, key, spec.Secrets)
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
		if host, _, err := net.SplitHostPort(g.Addr); err == nil {
			spec.EgressHosts = append(slices.Clip(spec.EgressHosts), host)
		}
	}
	spec.Egress = true
	spec.Secrets = nil
	return spec, reg, nil
}

// Trust writes reg's authority into sandbox id: alone at rules.TrustCAFile and
// appended to the system bundle.
func Trust(ctx context.Context, e engine.Engine, id string, reg Registration) error {
	if len(reg.TrustPEM) == 0 {
		return nil
	}
	if err := e.WriteFile(ctx, id, rules.TrustCAFile, reg.TrustPEM, 0o644); err != nil {
		return fmt.Errorf("write the egress authority into %s: %w", id, err)
	}
	bundle, _ := e.ReadFile(ctx, id, rules.TrustBundleFile)
	bundle = append(append(bundle, '\n'), reg.TrustPEM...)
	if err := e.WriteFile(ctx, id, rules.TrustBundleFile, bundle, 0o644); err != nil {
		return fmt.Errorf("add the egress authority to %s's bundle: %w", id, err)
	}
	return nil
}

// Release ends the credential of a sandbox created with Prepare (its labels).
func (g *Engine) Release(ctx context.Context, labels map[string]string) error {
	if g == nil || g.Registrar == nil || labels[LabelKey] == "" {
		return nil
	}
	return g.Registrar.Unregister(ctx, labels[LabelKey])
}
