package gateway

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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
	relay := &Engine{Registrar: g, Addr: "127.0.0.1:18090"}
	if spec, _, err := relay.Prepare(t.Context(), in); err != nil || !slices.Equal(spec.EgressHosts, in.EgressHosts) {
		t.Errorf("Prepare with a relay on loopback: egress hosts %q, %v; want the caller's alone", spec.EgressHosts, err)
	}
	if same, _, err := ge.Prepare(t.Context(), engine.Spec{Env: []string{"A=1"}}); err != nil || len(same.Env) != 1 {
		t.Errorf("Prepare without secrets = %+v, %v; want the spec as it is", same, err)
	}
}

// files is the file calls of an engine over a directory, as a remote platform's run
// as the sandbox's user: a write under /etc is refused when etcReadOnly.
type files struct {
	engine.Engine
	root        string
	etcReadOnly bool
}

func (f *files) path(p string) string { return filepath.Join(f.root, p) }

func (f *files) ReadFile(_ context.Context, _, p string) ([]byte, error) {
	return os.ReadFile(f.path(p))
}

func (f *files) MkdirAll(_ context.Context, _, p string) error { return os.MkdirAll(f.path(p), 0o755) }

func (f *files) WriteFile(_ context.Context, _, p string, data []byte, mode uint32) error {
	if f.etcReadOnly && strings.HasPrefix(p, "/etc/") {
		return fmt.Errorf("write %s: %w", p, fs.ErrPermission)
	}
	if err := os.MkdirAll(filepath.Dir(f.path(p)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(f.path(p), data, fs.FileMode(mode))
}

// TestTrust: the files the trust's environment names hold the authority (alone, and
// after the system's roots) whether or not the system's bundle is writable; the
// system's files get it where they are.
func TestTrust(t *testing.T) {
	const roots = "-----BEGIN CERTIFICATE-----\nSYSTEM\n-----END CERTIFICATE-----\n"
	reg := Registration{TrustPEM: []byte("-----BEGIN CERTIFICATE-----\nEGRESS\n-----END CERTIFICATE-----\n")}
	for _, readOnly := range []bool{false, true} {
		f := &files{root: t.TempDir(), etcReadOnly: readOnly}
		if err := os.MkdirAll(f.path(filepath.Dir(rules.TrustBundleFile)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f.path(rules.TrustBundleFile), []byte(roots), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := Trust(t.Context(), f, "sb", reg); err != nil {
			t.Fatalf("Trust (system bundle read-only %v) = %v", readOnly, err)
		}
		for _, kv := range rules.TrustEnv() {
			_, p, _ := strings.Cut(kv, "=")
			b, err := os.ReadFile(f.path(p))
			if err != nil || !strings.HasSuffix(string(b), string(reg.TrustPEM)) {
				t.Errorf("read-only %v: %s = %q, %v; want it to end with the authority", readOnly, kv, b, err)
			}
			if p == rules.TrustUserBundleFile && !strings.HasPrefix(string(b), roots) {
				t.Errorf("read-only %v: %s = %q, want the system's roots first", readOnly, p, b)
			}
		}
		b, _ := os.ReadFile(f.path(rules.TrustBundleFile))
		if got := strings.Contains(string(b), "EGRESS"); got == readOnly {
			t.Errorf("read-only %v: system bundle holds the authority: %v", readOnly, got)
		}
	}
}
