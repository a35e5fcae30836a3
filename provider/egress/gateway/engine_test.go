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
	"time"

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

// labeled is files with one sandbox whose labels Get reports, and its terminations
// counted.
type labeled struct {
	files
	labels     map[string]string
	terminated int
}

func (l *labeled) Get(context.Context, string) (engine.Info, error) {
	return engine.Info{ID: "sb", Labels: l.labels}, nil
}

func (l *labeled) Terminate(context.Context, string) error { l.terminated++; return nil }

// TestCreateTerminate: the adapters' one wrapper. Without a gateway a spec with
// secrets is refused before create; with one, create gets the prepared spec, a
// failed create or trust ends the registration (and the sandbox, once it exists), and
// Terminate ends it after the adapter's terminate.
func TestCreateTerminate(t *testing.T) {
	secret := engine.Spec{Secrets: []engine.Secret{{Name: "KEY", Value: value, Hosts: []string{"api.secret.test"}}}}
	var nilG *Engine
	called := false
	if _, err := nilG.Create(t.Context(), nil, "remote", secret, func(context.Context, engine.Spec) (string, error) {
		called = true
		return "sb", nil
	}); !errors.Is(err, engine.ErrUnsupported) || called {
		t.Errorf("Create without a gateway = %v (create called %v), want ErrUnsupported before create", err, called)
	}

	g := New(testConfig())
	defer g.Close()
	ge := &Engine{Registrar: g, Addr: "gw.example.com:8090"}
	var got engine.Spec
	create := func(err error) func(context.Context, engine.Spec) (string, error) {
		return func(_ context.Context, s engine.Spec) (string, error) { got = s; return "sb", err }
	}
	registered := func() bool { _, err := g.Counters(got.Labels[LabelKey]); return err == nil }

	l := &labeled{files: files{root: t.TempDir()}}
	if _, err := ge.Create(t.Context(), l, "remote", secret, create(errors.New("boom"))); err == nil || registered() || l.terminated != 0 {
		t.Errorf("Create whose create fails = %v, registered %v, terminated %d; want the error, no registration, nothing to terminate", err, registered(), l.terminated)
	}
	broken := &labeled{files: files{root: "/dev/null"}} // no directory under it: Trust fails
	if _, err := ge.Create(t.Context(), broken, "remote", secret, create(nil)); err == nil || registered() || broken.terminated != 1 {
		t.Errorf("Create whose trust fails = %v, registered %v, terminated %d; want the error, no registration, the sandbox terminated", err, registered(), broken.terminated)
	}
	id, err := ge.Create(t.Context(), l, "remote", secret, create(nil))
	if err != nil || id != "sb" || got.Secrets != nil || !registered() {
		t.Fatalf("Create = %q, %v (spec secrets %v, registered %v); want the sandbox of the prepared spec, registered", id, err, got.Secrets, registered())
	}
	l.labels = got.Labels
	if err := ge.Terminate(t.Context(), l, "sb", func(context.Context, string) error { return nil }); err != nil || registered() {
		t.Errorf("Terminate = %v, registered %v; want the registration ended", err, registered())
	}
}

// gone is labeled whose sandbox the engine no longer reports (Get fails), as an E2B
// sandbox past its timeout.
type gone struct{ labeled }

func (g *gone) Get(context.Context, string) (engine.Info, error) {
	return engine.Info{}, fmt.Errorf("sandbox sb: %w", engine.ErrNotFound)
}

// TestTerminateWithoutLabels: over the admin API, as a short-lived CLI reaches a
// long-running gateway, Create registers for the spec's Timeout and the grace and
// binds the registration to the sandbox's id, and Terminate ends it when the engine
// reports the sandbox without its labels (a finished Modal sandbox) or not at all (an
// expired E2B one).
func TestTerminateWithoutLabels(t *testing.T) {
	s := serve(t)
	ge := &Engine{Registrar: s.c, Addr: "gw.example.com:8090"}
	spec := engine.Spec{Timeout: 10 * time.Minute, Secrets: []engine.Secret{{Name: "KEY", Value: value, Hosts: []string{"up.test"}}}}
	for _, tt := range []struct {
		name string
		e    engine.Engine
	}{
		{"no labels", &labeled{files: files{root: t.TempDir()}}},
		{"not found", &gone{labeled{files: files{root: t.TempDir()}}}},
	} {
		var key string
		id, err := ge.Create(t.Context(), tt.e, "remote", spec, func(_ context.Context, got engine.Spec) (string, error) {
			key = got.Labels[LabelKey]
			return "engine-" + tt.name, nil
		})
		if err != nil {
			t.Fatalf("%s: Create = %v", tt.name, err)
		}
		s.g.mu.Lock()
		e := s.g.bySandbox[id]
		s.g.mu.Unlock()
		if e == nil || e.id != key {
			t.Fatalf("%s: after Create, sandbox %s is bound to %+v, want registration %s", tt.name, id, e, key)
		}
		if want := s.clock.now().Add(spec.Timeout + rules.GatewayGrace); !e.deadline.Equal(want) {
			t.Errorf("%s: deadline %v, want the Timeout and the grace from now, %v", tt.name, e.deadline, want)
		}
		if err := ge.Terminate(t.Context(), tt.e, id, func(context.Context, string) error { return nil }); err != nil {
			t.Fatalf("%s: Terminate = %v", tt.name, err)
		}
		if s.held(key) {
			t.Errorf("%s: the registration outlived Terminate", tt.name)
		}
	}
}

// lengthening is labeled whose file calls lengthen the sandbox's life, as E2B's
// connect does, and say so to the gateway (Extend).
type lengthening struct {
	labeled
	ge *Engine
}

func (l *lengthening) MkdirAll(ctx context.Context, id, p string) error {
	if err := l.ge.Extend(ctx, id, time.Hour); err != nil {
		return err
	}
	return l.labeled.MkdirAll(ctx, id, p)
}

// TestCreateBindsBeforeTrust: the registration is bound before the trust's file
// calls, so a sandbox whose life they lengthen gets a credential as long.
func TestCreateBindsBeforeTrust(t *testing.T) {
	s := serve(t)
	ge := &Engine{Registrar: s.c, Addr: "gw.example.com:8090"}
	e := &lengthening{labeled: labeled{files: files{root: t.TempDir()}}, ge: ge}
	spec := engine.Spec{Timeout: 10 * time.Minute, Secrets: []engine.Secret{{Name: "KEY", Value: value, Hosts: []string{"up.test"}}}}
	id, err := ge.Create(t.Context(), e, "remote", spec, func(context.Context, engine.Spec) (string, error) { return "engine-long", nil })
	if err != nil {
		t.Fatal(err)
	}
	s.g.mu.Lock()
	b := s.g.bySandbox[id]
	s.g.mu.Unlock()
	if want := s.clock.now().Add(Lifetime(time.Hour)); b == nil || !b.deadline.Equal(want) {
		t.Errorf("after a create whose trust lengthened the sandbox to an hour: binding %+v, want the deadline %v", b, want)
	}
}
