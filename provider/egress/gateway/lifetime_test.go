package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

const adminToken = "admin-token-0123456789"

// clock is a Config.Now the test moves.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// served is a Gateway on the clock, its proxy and its admin API on loopback, an
// upstream behind it, and a Client of the admin API.
type served struct {
	g      *Gateway
	clock  *clock
	c      *Client
	proxy  string
	upPort string
}

func serve(t *testing.T) *served {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(up.Close)
	_, upPort, _ := net.SplitHostPort(up.Listener.Addr().String())
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := testConfig()
	c.Now, c.Sweep = clk.now, 10*time.Millisecond
	g := New(c)
	t.Cleanup(g.Close)
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	admin, err := AdminHandler(g, adminToken)
	if err != nil {
		t.Fatal(err)
	}
	adm := httptest.NewServer(admin)
	t.Cleanup(adm.Close)
	return &served{g: g, clock: clk, c: &Client{URL: adm.URL, Token: adminToken}, proxy: gw.URL, upPort: upPort}
}

// status is the status of a request through the gateway with cred.
func (s *served) status(t *testing.T, cred string) int {
	t.Helper()
	pu, _ := url.Parse(s.proxy)
	pu.User = url.User(cred)
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Timeout: 20 * time.Second, Transport: tr}).Get("http://up.test:" + s.upPort + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// held reports whether the gateway holds id's registration in any index.
func (s *served) held(id string) bool {
	s.g.mu.Lock()
	defer s.g.mu.Unlock()
	if s.g.byID[id] != nil {
		return true
	}
	for _, e := range s.g.byHash {
		if e.id == id {
			return true
		}
	}
	for _, e := range s.g.bySandbox {
		if e.id == id {
			return true
		}
	}
	return false
}

func (s *served) register(t *testing.T, id string, ttl time.Duration) Registration {
	t.Helper()
	reg, err := s.c.Register(t.Context(), id, []engine.Secret{{Name: "KEY", Value: value, Hosts: []string{"up.test"}}}, ttl)
	if err != nil {
		t.Fatalf("Register(%s, ttl %v) = %v", id, ttl, err)
	}
	return reg
}

// TestLifetime: through the admin API, a credential registered with a lifetime is
// refused (407) past it and the registration forgotten, used or not (the sweep); one
// without a lifetime lives on; Extend moves a bound credential's deadline, and zero
// takes it away.
func TestLifetime(t *testing.T) {
	s := serve(t)
	used := s.register(t, "sb-used", time.Hour)
	idle := s.register(t, "sb-idle", time.Hour)
	forever := s.register(t, "sb-forever", 0)
	s.register(t, "sb-extended", time.Hour)
	if err := s.c.Bind(t.Context(), "sb-extended", "engine-ext"); err != nil {
		t.Fatal(err)
	}
	for _, cred := range []string{used.Credential, idle.Credential, forever.Credential} {
		if code := s.status(t, cred); code != http.StatusOK {
			t.Fatalf("a fresh credential = %d, want 200", code)
		}
	}
	if err := s.c.Extend(t.Context(), "engine-ext", 3*time.Hour); err != nil {
		t.Fatal(err)
	}

	s.clock.add(time.Hour + time.Second)
	if code := s.status(t, used.Credential); code != http.StatusProxyAuthRequired {
		t.Errorf("a credential past its lifetime = %d, want 407", code)
	}
	if _, err := s.g.Counters("sb-used"); !errors.Is(err, ErrUnknown) || s.held("sb-used") {
		t.Errorf("Counters of a registration past its lifetime = %v (held %v), want ErrUnknown, gone", err, s.held("sb-used"))
	}
	for i := 0; s.held("sb-idle") && i < 500; i++ { // the sweep runs every 10 ms
		time.Sleep(10 * time.Millisecond)
	}
	if s.held("sb-idle") {
		t.Error("an unused registration past its lifetime was not swept within 5 s")
	}
	if code := s.status(t, forever.Credential); code != http.StatusOK {
		t.Errorf("a credential without a lifetime after an hour = %d, want 200", code)
	}
	if _, err := s.g.Counters("sb-extended"); err != nil {
		t.Errorf("a credential extended to 3 h, after 1 h: %v", err)
	}

	// Shorter than the deadline: no change. Zero: none. Then a deadline again.
	if err := s.c.Extend(t.Context(), "engine-ext", time.Minute); err != nil {
		t.Fatal(err)
	}
	s.clock.add(time.Hour)
	if _, err := s.g.Counters("sb-extended"); err != nil {
		t.Errorf("Extend by less than the deadline shortened it: %v", err)
	}
	if err := s.c.Extend(t.Context(), "engine-ext", 0); err != nil {
		t.Fatal(err)
	}
	s.clock.add(100 * time.Hour)
	if _, err := s.g.Counters("sb-extended"); err != nil {
		t.Errorf("a credential extended by 0 (paused) expired: %v", err)
	}
	if err := s.c.Extend(t.Context(), "engine-ext", time.Hour); err != nil {
		t.Fatal(err)
	}
	s.clock.add(time.Hour)
	if _, err := s.g.Counters("sb-extended"); !errors.Is(err, ErrUnknown) {
		t.Errorf("a credential given a deadline again lived past it: %v", err)
	}
	if err := s.c.Extend(t.Context(), "engine-unbound", time.Hour); err != nil {
		t.Errorf("Extend of an unbound sandbox = %v, want nil", err)
	}
}

// TestBind: a bound registration ends by the engine's sandbox id over the admin API;
// a rebind moves the binding; a Bind of an unknown registration is ErrUnknown.
func TestBind(t *testing.T) {
	s := serve(t)
	reg := s.register(t, "sb-key", time.Hour)
	if err := s.c.Bind(t.Context(), "sb-nope", "engine-1"); !errors.Is(err, ErrUnknown) {
		t.Errorf("Bind of an unknown registration = %v, want ErrUnknown", err)
	}
	if err := s.c.Bind(t.Context(), "sb-key", "engine-0"); err != nil {
		t.Fatal(err)
	}
	if err := s.c.Bind(t.Context(), "sb-key", "engine-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.c.UnregisterSandbox(t.Context(), "engine-0"); err != nil || !s.held("sb-key") {
		t.Errorf("UnregisterSandbox of the binding replaced = %v, held %v; want nil, still held", err, s.held("sb-key"))
	}
	if err := s.c.UnregisterSandbox(t.Context(), "engine-1"); err != nil {
		t.Fatal(err)
	}
	if s.held("sb-key") {
		t.Error("the registration outlived UnregisterSandbox of its sandbox")
	}
	if code := s.status(t, reg.Credential); code != http.StatusProxyAuthRequired {
		t.Errorf("the credential after UnregisterSandbox = %d, want 407", code)
	}
	if err := s.c.UnregisterSandbox(t.Context(), "engine-1"); err != nil {
		t.Errorf("UnregisterSandbox of an unbound sandbox = %v, want nil", err)
	}
}

// TestAdminTTL: the admin API refuses a lifetime that is negative, beyond
// rules.MaxGatewayTTL or not a whole number, on register and on extend.
func TestAdminTTL(t *testing.T) {
	s := serve(t)
	s.register(t, "sb-bound", time.Hour)
	if err := s.c.Bind(t.Context(), "sb-bound", "engine-b"); err != nil {
		t.Fatal(err)
	}
	maxS := strconv.FormatInt(int64(rules.MaxGatewayTTL/time.Second), 10)
	over := strconv.FormatInt(int64(rules.MaxGatewayTTL/time.Second)+1, 10)
	tests := []struct {
		name, method, path, body string
		want                     int
	}{
		{"register none", "PUT", "/v1/sandboxes/a", `{"secrets":[]}`, 200},
		{"register max", "PUT", "/v1/sandboxes/b", `{"secrets":[],"ttl_seconds":` + maxS + `}`, 200},
		{"register negative", "PUT", "/v1/sandboxes/c", `{"ttl_seconds":-1}`, 400},
		{"register over max", "PUT", "/v1/sandboxes/d", `{"ttl_seconds":` + over + `}`, 400},
		{"register huge", "PUT", "/v1/sandboxes/e", `{"ttl_seconds":1e30}`, 400},
		{"register fraction", "PUT", "/v1/sandboxes/f", `{"ttl_seconds":1.5}`, 400},
		{"register string", "PUT", "/v1/sandboxes/g", `{"ttl_seconds":"60"}`, 400},
		{"extend", "PATCH", "/v1/bindings/engine-b", `{"ttl_seconds":60}`, 204},
		{"extend negative", "PATCH", "/v1/bindings/engine-b", `{"ttl_seconds":-5}`, 400},
		{"extend over max", "PATCH", "/v1/bindings/engine-b", `{"ttl_seconds":` + over + `}`, 400},
		{"bind unknown", "PUT", "/v1/bindings/engine-x", `{"id":"sb-nope"}`, 404},
	}
	for _, tt := range tests {
		req, _ := http.NewRequestWithContext(t.Context(), tt.method, s.c.URL+tt.path, bytes.NewBufferString(tt.body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %s %s %s = %d, want %d", tt.name, tt.method, tt.path, tt.body, resp.StatusCode, tt.want)
		}
	}
	for _, id := range []string{"c", "d", "e", "f", "g"} {
		if s.held(id) {
			t.Errorf("a refused registration %s is held", id)
		}
	}
	if _, err := s.g.Register(t.Context(), "go", nil, -time.Second); err == nil {
		t.Error("Gateway.Register with a negative lifetime succeeded")
	}
}

// FuzzAdmin: whatever body a register or extend carries, the admin API answers 2xx,
// 400 or 404, never 500, and a registration it accepts has a lifetime within bounds.
func FuzzAdmin(f *testing.F) {
	f.Add(true, []byte(`{"secrets":[{"name":"K","value":"sk-0123456789abcdef","hosts":["a.test"]}],"ttl_seconds":60}`))
	f.Add(true, []byte(`{"ttl_seconds":-1}`))
	f.Add(false, []byte(`{"ttl_seconds":172800}`))
	f.Add(false, []byte(`{"ttl_seconds":1e99}`))
	g := New(Config{})
	defer g.Close()
	h, err := AdminHandler(g, adminToken)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := g.Register(context.Background(), "fz", nil, time.Hour); err != nil {
		f.Fatal(err)
	}
	if err := g.Bind(context.Background(), "fz", "engine-fz"); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, register bool, body []byte) {
		method, path := "PATCH", "/v1/bindings/engine-fz"
		if register {
			method, path = "PUT", "/v1/sandboxes/fz-new"
		}
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch code := w.Code; {
		case code >= 200 && code < 300, code == 400, code == 404:
		default:
			t.Fatalf("%s %s %q = %d %s, want 2xx, 400 or 404", method, path, body, code, w.Body)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		for id, e := range g.byID {
			if !e.deadline.IsZero() && time.Until(e.deadline) > rules.MaxGatewayTTL {
				t.Fatalf("registration %s lives until %v, beyond %v", id, e.deadline, rules.MaxGatewayTTL)
			}
		}
	})
}

// BenchmarkSweep is one sweep over 100 000 live registrations (it looks at maxSweep
// of them), the time the gateway's lock is held per tick.
func BenchmarkSweep(b *testing.B) {
	g := New(Config{})
	defer func() { g.mu.Lock(); g.byID = map[string]*entry{}; g.mu.Unlock(); g.Close() }()
	deadline := time.Now().Add(time.Hour)
	g.mu.Lock()
	for i := range 100_000 {
		id := "sb-" + strconv.Itoa(i)
		g.byID[id] = &entry{id: id, deadline: deadline}
	}
	g.mu.Unlock()
	for b.Loop() {
		if n := g.sweep(); n != 0 {
			b.Fatalf("sweep forgot %d live registrations", n)
		}
	}
}
