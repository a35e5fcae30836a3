package gateway

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestRefuse(t *testing.T) {
	if err := Refuse("e", engine.Spec{}); err != nil {
		t.Errorf("Refuse without secrets = %v", err)
	}
	err := Refuse("e", engine.Spec{Secrets: []engine.Secret{{Name: "K"}}})
	if !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("Refuse with secrets = %v, want ErrUnsupported", err)
	}
}

func TestPrepareRelease(t *testing.T) {
	g := New(testConfig())
	defer g.Close()
	ge := &Engine{Registrar: g, Addr: "gw.example.com:8090"}
	in := engine.Spec{Env: []string{"A=1"}, EgressHosts: []string{"pypi.org"}, Labels: map[string]string{"x": "y"},
		Secrets: []engine.Secret{{Name: "KEY", Value: value, Hosts: []string{"api.secret.test"}}}}
	spec, reg, err := ge.Prepare(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Join(spec.Env, "\n")
	for _, want := range []string{"A=1", reg.Env[0], "HTTPS_PROXY=http://" + reg.Credential + "@gw.example.com:8090", rules.TrustEnv()[0]} {
		if !slices.Contains(spec.Env, want) {
			t.Errorf("env %q lacks %q", env, want)
		}
	}
	if strings.Contains(env, value) || spec.Secrets != nil || !spec.Egress {
		t.Errorf("prepared spec holds the value or the secrets, or no egress: %+v", spec)
	}
	if !slices.Contains(spec.EgressHosts, "gw.example.com") || in.Labels[LabelKey] != "" || spec.Labels[LabelKey] == "" {
		t.Errorf("egress hosts %q, labels %v (caller's %v)", spec.EgressHosts, spec.Labels, in.Labels)
	}
	if _, err := g.Counters(spec.Labels[LabelKey]); err != nil {
		t.Errorf("the sandbox is not registered: %v", err)
	}
	if err := ge.Release(t.Context(), spec.Labels); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Counters(spec.Labels[LabelKey]); err == nil {
		t.Error("the registration outlived Release")
	}
	if same, _, err := ge.Prepare(t.Context(), engine.Spec{Env: []string{"A=1"}}); err != nil || len(same.Env) != 1 {
		t.Errorf("Prepare without secrets = %+v, %v; want the spec as it is", same, err)
	}
}
