package ingress_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/ingress"
)

const (
	token     = "platform-token-5b1e"
	agentPort = 3000
)

var jwtKey = []byte("jwt-key-for-tests-0123456789abcdef")

// seen is what the agent's server received.
type seen struct {
	Path, Query, Auth, Host string
}

// agent starts a real server standing for a service of the agent sandbox
// and returns an ingress in front of it, with a dial that counts.
func agent(t testing.TB, cfg ingress.Config) (ing *httptest.Server, dials *atomic.Int64, got chan seen) {
	t.Helper()
	got = make(chan seen, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		// First, what the agent saw of the credential.
		if err := c.Write(r.Context(), websocket.MessageText, []byte("query="+r.URL.RawQuery+" auth="+r.Header.Get("Authorization"))); err != nil {
			return
		}
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte("echo:"), msg...)); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- seen{Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization"), Host: r.Host}:
		default:
		}
		io.WriteString(w, "preview "+r.URL.Path)
	})
	backend := httptest.NewServer(mux)
	t.Cleanup(backend.Close)
	dials = new(atomic.Int64)
	cfg.Dial = func(ctx context.Context, port int) (net.Conn, error) {
		dials.Add(1)
		if port != agentPort {
			return nil, fmt.Errorf("nothing listens on port %d", port)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", backend.Listener.Addr().String())
	}
	if cfg.Ports == nil {
		cfg.Ports = []int{agentPort, 3001}
	}
	h, err := ingress.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ing = httptest.NewServer(h)
	t.Cleanup(ing.Close)
	return ing, dials, got
}

func jwt(t testing.TB, key []byte, exp time.Time, alg string) string {
	t.Helper()
	s, err := ingress.SignJWT(map[string]any{"sub": "user", "exp": exp.Unix()}, key)
	if err != nil {
		t.Fatal(err)
	}
	if alg != "" {
		// Re-sign nothing: only swap the header, so the signature no longer
		// matches and the alg is not HS256.
		parts := strings.SplitN(s, ".", 2)
		hdr, _ := json.Marshal(map[string]string{"alg": alg})
		s = b64(hdr) + "." + parts[1]
	}
	return s
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func get(t testing.TB, url, auth string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestIngressRefusesWithoutAuth(t *testing.T) {
	ing, dials, _ := agent(t, ingress.Config{Token: token, JWTKey: jwtKey})
	now := time.Now()
	cases := []struct {
		name, auth, query string
	}{
		{"none", "", ""},
		{"wrong token", "Bearer not-the-token", ""},
		{"token prefix", "Bearer " + token[:len(token)-1], ""},
		{"basic scheme", "Basic " + token, ""},
		{"empty bearer", "Bearer ", ""},
		{"wrong query token", "", "?access_token=nope"},
		{"query token on a page", "", "?access_token=" + token},
		{"expired jwt", "Bearer " + jwt(t, jwtKey, now.Add(-time.Minute), ""), ""},
		{"jwt other key", "Bearer " + jwt(t, []byte("another key"), now.Add(time.Hour), ""), ""},
		{"jwt alg none", "Bearer " + jwt(t, jwtKey, now.Add(time.Hour), "none"), ""},
		{"unauthenticated port probe", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, ing.URL+"/port/3000/secret"+tc.query, tc.auth)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET with %q = %d %s, want 401", tc.auth, resp.StatusCode, body)
			}
			if strings.Contains(body, "preview") {
				t.Errorf("body %q came from the agent", body)
			}
		})
	}
	if n := dials.Load(); n != 0 {
		t.Errorf("the agent was dialled %d times by unauthenticated requests, want 0", n)
	}
}

func TestIngressForwards(t *testing.T) {
	ing, _, got := agent(t, ingress.Config{Token: token, JWTKey: jwtKey})
	valid := jwt(t, jwtKey, time.Now().Add(time.Hour), "")
	cases := []struct {
		name, path, auth string
		want             seen
	}{
		{"bearer token", "/port/3000/app/index.html?x=1", "Bearer " + token, seen{Path: "/app/index.html", Query: "x=1", Host: "localhost:3000"}},
		{"jwt", "/port/3000/", "Bearer " + valid, seen{Path: "/", Host: "localhost:3000"}},
		{"no trailing slash", "/port/3000", "Bearer " + token, seen{Path: "/", Host: "localhost:3000"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, ing.URL+tc.path, tc.auth)
			if resp.StatusCode != http.StatusOK || body != "preview "+tc.want.Path {
				t.Fatalf("GET %s = %d %q, want 200 %q", tc.path, resp.StatusCode, body, "preview "+tc.want.Path)
			}
			s := <-got
			if s != tc.want {
				t.Errorf("agent saw %+v, want %+v (no Authorization, no access_token)", s, tc.want)
			}
		})
	}
}

// TestIngressUpstreamToken: a port with an upstream token gets it in place of
// the platform's credential, from the static token and a JWT alike.
func TestIngressUpstreamToken(t *testing.T) {
	ing, _, got := agent(t, ingress.Config{Token: token, JWTKey: jwtKey, UpstreamTokens: map[int]string{agentPort: "sidecar-tok"}})
	for _, auth := range []string{"Bearer " + token, "Bearer " + jwt(t, jwtKey, time.Now().Add(time.Hour), "")} {
		resp, _ := get(t, ing.URL+"/port/3000/api", auth)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET = %d, want 200", resp.StatusCode)
		}
		if s := <-got; s.Auth != "Bearer sidecar-tok" {
			t.Errorf("agent saw Authorization %q, want the upstream token", s.Auth)
		}
	}
	if resp, _ := get(t, ing.URL+"/port/3000/api", ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without the platform's token = %d, want 401: the upstream token opens nothing by itself", resp.StatusCode)
	}
}

func TestIngressPorts(t *testing.T) {
	ing, dials, _ := agent(t, ingress.Config{Token: token})
	cases := []struct {
		path string
		want int
	}{
		{"/port/22/", http.StatusForbidden},
		{"/port/65536/", http.StatusNotFound},
		{"/port/03000/", http.StatusNotFound},
		{"/port/x/", http.StatusNotFound},
		{"/other", http.StatusNotFound},
		{"/port/3001/", http.StatusBadGateway}, // allowed, but nothing listens
	}
	for _, tc := range cases {
		resp, body := get(t, ing.URL+tc.path, "Bearer "+token)
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s = %d %s, want %d", tc.path, resp.StatusCode, body, tc.want)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("dials = %d, want 1 (only the allowed port 3001)", n)
	}
}

func TestIngressWebSocket(t *testing.T) {
	ing, _, _ := agent(t, ingress.Config{Token: token})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(ing.URL, "http") + "/port/3000/ws"
	if _, _, err := websocket.Dial(ctx, wsURL, nil); err == nil {
		t.Fatal("a WebSocket without a token was accepted")
	}
	for _, opts := range []struct {
		name string
		url  string
		hdr  http.Header
	}{
		{"header", wsURL + "?x=1", http.Header{"Authorization": {"Bearer " + token}}},
		{"query", wsURL + "?access_token=" + token + "&x=1", nil},
	} {
		t.Run(opts.name, func(t *testing.T) {
			c, _, err := websocket.Dial(ctx, opts.url, &websocket.DialOptions{HTTPHeader: opts.hdr})
			if err != nil {
				t.Fatalf("dial %s: %v", opts.url, err)
			}
			defer c.CloseNow()
			_, first, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(first) != "query=x=1 auth=" {
				t.Errorf("the agent saw %q, want %q (credential stripped)", first, "query=x=1 auth=")
			}
			for i := range 3 {
				msg := fmt.Sprintf("hello %d", i)
				if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				_, got, err := c.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != "echo:"+msg {
					t.Errorf("read %q, want %q", got, "echo:"+msg)
				}
			}
			c.Close(websocket.StatusNormalClosure, "")
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	dial := func(context.Context, int) (net.Conn, error) { return nil, nil }
	cases := []struct {
		name string
		cfg  ingress.Config
	}{
		{"no credential", ingress.Config{Dial: dial, Ports: []int{1}}},
		{"no dial", ingress.Config{Token: "t", Ports: []int{1}}},
		{"no ports", ingress.Config{Token: "t", Dial: dial}},
		{"bad port", ingress.Config{Token: "t", Dial: dial, Ports: []int{70000}}},
	}
	for _, tc := range cases {
		if _, err := ingress.New(tc.cfg); err == nil {
			t.Errorf("New(%s) = nil error, want one", tc.name)
		}
	}
}

func TestSplitPath(t *testing.T) {
	cases := []struct {
		in   string
		port int
		rest string
		ok   bool
	}{
		{"/port/3000/a/b", 3000, "/a/b", true},
		{"/port/3000", 3000, "/", true},
		{"/port/1/", 1, "/", true},
		{"/port/65535/x", 65535, "/x", true},
		{"/port/65536/x", 0, "", false},
		{"/port/0/x", 0, "", false},
		{"/port//x", 0, "", false},
		{"/port/-1/x", 0, "", false},
		{"/port/+80/x", 0, "", false},
		{"/ports/80/x", 0, "", false},
		{"/", 0, "", false},
	}
	for _, tc := range cases {
		port, rest, ok := ingress.SplitPath(tc.in)
		if port != tc.port || rest != tc.rest || ok != tc.ok {
			t.Errorf("SplitPath(%q) = %d, %q, %v, want %d, %q, %v", tc.in, port, rest, ok, tc.port, tc.rest, tc.ok)
		}
	}
}

func FuzzSplitPath(f *testing.F) {
	for _, s := range []string{"/port/3000/a", "/port/0", "/port/99999/", "/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		port, rest, ok := ingress.SplitPath(s)
		if ok && (port < 1 || port > 65535 || !strings.HasPrefix(rest, "/")) {
			t.Errorf("SplitPath(%q) = %d, %q, true: out of range", s, port, rest)
		}
	})
}

func FuzzVerifyJWT(f *testing.F) {
	good, _ := ingress.SignJWT(map[string]any{"exp": 4102444800}, jwtKey)
	for _, s := range []string{good, "a.b.c", "", "..", "eyJhbGciOiJub25lIn0.e30."} {
		f.Add(s)
	}
	now := time.Unix(1700000000, 0)
	f.Fuzz(func(t *testing.T, s string) {
		if err := ingress.VerifyJWT(s, jwtKey, now); err == nil && s != good {
			// Only a token signed with the key passes; the fuzzer cannot forge HMAC.
			parts := strings.Split(s, ".")
			if len(parts) != 3 || !strings.HasPrefix(good, parts[0]) {
				t.Errorf("VerifyJWT(%q) accepted a token not signed with the key", s)
			}
		}
	})
}

// BenchmarkPreview compares a preview request through the ingress with the
// same request straight to the agent's server; the p50 of each is reported.
func BenchmarkPreview(b *testing.B) {
	ing, _, _ := agent(b, ingress.Config{Token: token})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	direct := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "preview "+r.URL.Path)
	}))
	b.Cleanup(direct.Close)
	for _, bc := range []struct{ name, url, auth string }{
		{"direct", direct.URL + "/index.html", ""},
		{"ingress", ing.URL + "/port/3000/index.html", "Bearer " + token},
	} {
		b.Run(bc.name, func(b *testing.B) {
			times := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				req, _ := http.NewRequest("GET", bc.url, nil)
				if bc.auth != "" {
					req.Header.Set("Authorization", bc.auth)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				times = append(times, time.Since(start))
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
		})
	}
}
