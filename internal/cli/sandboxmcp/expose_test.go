package sandboxmcp

import (
	"context"
	"encoding/json"
	"github.com/proliferate-ai/sandbox-mcp/caddyfile"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/caddy/caddytest"
	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

const e2eToken = "e2e-token"

type sandbox struct {
	site   string // host:port of Caddy's preview site
	api    string // host:port of the API
	caddy  *caddytest.Caddy
	cfg    config.Config
	vscode int
}

// startSandbox starts Caddy on caddyfile(s) (when startCaddy) and serveAPI,
// all on free loopback ports, and waits until the API answers.
func startSandbox(t *testing.T, caddyfile func(s *sandbox) []byte, startCaddy bool) *sandbox {
	t.Helper()
	caddytest.Binary(t)
	dir := t.TempDir()
	socket := caddytest.SocketPath(t)
	s := &sandbox{
		site:   caddytest.Addr(testutil.FreePort(t)),
		api:    caddytest.Addr(testutil.FreePort(t)),
		vscode: testutil.EchoApp(t, "vscode"),
	}
	s.cfg = config.Config{
		Addr:         s.api,
		Token:        e2eToken,
		WorkspaceDir: dir,
		StateDir:     filepath.Join(dir, "state"),
		CaddySnippet: filepath.Join(dir, "snippets", "user.caddy"),
		CaddyAdmin:   "unix/" + socket,
		Caddyfile:    filepath.Join(dir, "Caddyfile"),
		PreviewAddr:  caddytest.Addr(testutil.FreePort(t)),
	}
	if err := os.MkdirAll(filepath.Dir(s.cfg.CaddySnippet), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.cfg.CaddySnippet, []byte("# placeholder\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	main := caddyfile(s)
	if startCaddy {
		s.caddy = caddytest.Start(t, dir, main, socket, s.site)
	} else if err := os.WriteFile(s.cfg.Caddyfile, main, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { errc <- serveAPI(ctx, s.cfg, log) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serveAPI: %v", err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + s.api + "/api/health")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("API did not start: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func renderedMain(t *testing.T) func(s *sandbox) []byte {
	return func(s *sandbox) []byte {
		b, err := caddyfile.RenderMain(caddyfile.MainOptions{
			Site:          "http://" + s.site,
			Bind:          "127.0.0.1",
			AdminSocket:   strings.TrimPrefix(s.cfg.CaddyAdmin, "unix/"),
			API:           s.api,
			VSCode:        "127.0.0.1:" + strconv.Itoa(s.vscode),
			SnippetPath:   s.cfg.CaddySnippet,
			Preview:       s.cfg.PreviewAddr,
			FallbackPorts: []int{testutil.FreePort(t)},
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// oldMain is shaped like the Caddyfile of older images: the user snippet
// before a fallback to the dev-server ports, with an admin socket.
func oldMain(t *testing.T) func(s *sandbox) []byte {
	return func(s *sandbox) []byte {
		return []byte("{\n    admin " + s.cfg.CaddyAdmin + "\n}\n\nhttp://" + s.site + " {\n    bind 127.0.0.1\n" +
			"    handle_path /_proliferate/mcp/* {\n        reverse_proxy " + s.api + "\n    }\n" +
			"    import " + s.cfg.CaddySnippet + "\n" +
			"    handle {\n        reverse_proxy localhost:" + strconv.Itoa(testutil.FreePort(t)) + "\n    }\n}\n")
	}
}

var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func call(t *testing.T, method, url, auth, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	// A fresh connection each time: a keep-alive connection may still be
	// served by the configuration Caddy had before a load.
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func (s *sandbox) expose(t *testing.T, port int) (int, string) {
	t.Helper()
	code, body, _ := call(t, "POST", "http://"+s.site+"/_proliferate/mcp/api/expose", "Bearer "+e2eToken, `{"port":`+strconv.Itoa(port)+`}`)
	return code, strings.TrimSpace(body)
}

func wsEcho(t *testing.T, ctx context.Context, c *websocket.Conn, msg string) string {
	t.Helper()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatalf("WebSocket write %q: %v", msg, err)
	}
	_, got, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("WebSocket read after %q: %v", msg, err)
	}
	return string(got)
}

// exposeAndSwitch is acceptance for both Caddyfiles: after POST /api/expose
// the preview site reaches the app, and a WebSocket opened through Caddy stays
// open and working while the exposed port moves to B and back.
func exposeAndSwitch(t *testing.T, s *sandbox) {
	a, b := testutil.EchoApp(t, "a"), testutil.EchoApp(t, "b")
	want := func(port int) string { return `{"success":true,"exposedPort":` + strconv.Itoa(port) + `}` }
	if code, body := s.expose(t, a); code != 200 || body != want(a) {
		t.Fatalf("POST /api/expose {%d} = %d %s, want 200 %s", a, code, body, want(a))
	}
	code, body, h := call(t, "GET", "http://"+s.site+"/page", "", "")
	if code != 200 || body != "a" {
		t.Fatalf("GET preview /page = %d %q, want 200 %q", code, body, "a")
	}
	if v := h.Get("X-Frame-Options"); v != "" {
		t.Errorf("preview response X-Frame-Options = %q, want it stripped", v)
	}
	if v := h.Get("Content-Security-Policy"); v != "" {
		t.Errorf("preview response Content-Security-Policy = %q, want it stripped", v)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+s.site+"/hmr", nil)
	if err != nil {
		t.Fatalf("dial WebSocket through Caddy: %v", err)
	}
	defer conn.CloseNow()
	if got := wsEcho(t, ctx, conn, "1"); got != "a:1" {
		t.Fatalf("WebSocket echo = %q, want a:1", got)
	}
	if code, body := s.expose(t, b); code != 200 || body != want(b) {
		t.Fatalf("POST /api/expose {%d} = %d %s, want 200 %s", b, code, body, want(b))
	}
	if got := wsEcho(t, ctx, conn, "2"); got != "a:2" {
		t.Errorf("after exposing B, the open WebSocket echoed %q, want a:2", got)
	}
	if _, body, _ := call(t, "GET", "http://"+s.site+"/", "", ""); body != "b" {
		t.Errorf("after exposing B, GET preview / = %q, want %q", body, "b")
	}
	if code, body := s.expose(t, a); code != 200 || body != want(a) {
		t.Fatalf("POST /api/expose {%d} = %d %s, want 200 %s", a, code, body, want(a))
	}
	if got := wsEcho(t, ctx, conn, "3"); got != "a:3" {
		t.Errorf("after exposing A again, the open WebSocket echoed %q, want a:3", got)
	}
	if _, body, _ := call(t, "GET", "http://"+s.site+"/", "", ""); body != "a" {
		t.Errorf("after exposing A again, GET preview / = %q, want %q", body, "a")
	}
	conn.Close(websocket.StatusNormalClosure, "")

	_, body, _ = call(t, "GET", "http://"+s.api+"/api/expose", "Bearer "+e2eToken, "")
	var st apitype.ExposeStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("GET /api/expose = %s: %v", body, err)
	}
	if st.ExposedPort == nil || *st.ExposedPort != a || st.Upstream != "exposed" || !st.CaddyRouted {
		t.Errorf("GET /api/expose = %s, want exposedPort %d, upstream exposed, caddyRouted true", body, a)
	}
}

func TestExposeThroughRenderedCaddyfile(t *testing.T) {
	s := startSandbox(t, renderedMain(t), true)
	exposeAndSwitch(t, s)
	if n := strings.Count(s.caddy.Log(), "load complete"); n != 0 {
		t.Errorf("Caddy loaded a config %d times; with the rendered Caddyfile exposure needs no reload", n)
	}
}

func TestExposeThroughOldCaddyfileLoadsSnippetOnce(t *testing.T) {
	s := startSandbox(t, oldMain(t), true)
	exposeAndSwitch(t, s)
	if n := strings.Count(s.caddy.Log(), "load complete"); n != 1 {
		t.Errorf("Caddy loaded a config %d times, want exactly once (the snippet, at start-up)", n)
	}
}

func TestVSCodeBehindForwardAuth(t *testing.T) {
	s := startSandbox(t, renderedMain(t), true)
	url := "http://" + s.site + "/_proliferate/vscode/workbench?folder=/x"
	for _, tt := range []struct {
		auth     string
		wantCode int
	}{
		{"", 401},
		{"Bearer wrong", 401},
		{"Bearer " + e2eToken, 200},
	} {
		code, body, h := call(t, "GET", url, tt.auth, "")
		if code != tt.wantCode {
			t.Errorf("GET %s with %q = %d %s, want %d", url, tt.auth, code, body, tt.wantCode)
		}
		if code == 200 && (body != "vscode" || h.Get("X-Path") != "/workbench") {
			t.Errorf("GET %s = %q at path %q, want the VS Code stand-in at /workbench", url, body, h.Get("X-Path"))
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, "ws://"+s.site+"/_proliferate/vscode/socket", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + e2eToken}},
	})
	if err != nil {
		t.Fatalf("VS Code WebSocket through forward_auth: %v", err)
	}
	defer conn.CloseNow()
	if got := wsEcho(t, ctx, conn, "hi"); got != "vscode:hi" {
		t.Errorf("VS Code WebSocket echo = %q, want vscode:hi", got)
	}
	conn.Close(websocket.StatusNormalClosure, "")
}

// TestExposeWithCaddyDown: the answer is a 502 naming what failed, but the
// port is recorded and the preview proxy already serves it.
func TestExposeWithCaddyDown(t *testing.T) {
	s := startSandbox(t, oldMain(t), false)
	a := testutil.EchoApp(t, "a")
	code, body, _ := call(t, "POST", "http://"+s.api+"/api/expose", "Bearer "+e2eToken, `{"port":`+strconv.Itoa(a)+`}`)
	var got struct {
		Error       string `json:"error"`
		ExposedPort int    `json:"exposedPort"`
	}
	_ = json.Unmarshal([]byte(body), &got)
	if code != 502 || got.ExposedPort != a || !strings.Contains(got.Error, "caddy admin endpoint") {
		t.Errorf("POST /api/expose with Caddy down = %d %s, want 502 naming the admin endpoint with exposedPort %d", code, body, a)
	}
	if _, body, _ := call(t, "GET", "http://"+s.cfg.PreviewAddr+"/", "", ""); body != "a" {
		t.Errorf("GET preview proxy = %q, want %q", body, "a")
	}
	if b, _ := os.ReadFile(s.cfg.CaddySnippet); !strings.Contains(string(b), s.cfg.PreviewAddr) {
		t.Errorf("snippet = %q, want it written for a Caddy that starts later", b)
	}
}

// TestAPIServesWhenPreviewPortIsTaken: exposure is off (501), the rest serves.
func TestAPIServesWhenPreviewPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	cfg := config.Config{
		Addr:         caddytest.Addr(testutil.FreePort(t)),
		Token:        e2eToken,
		WorkspaceDir: dir,
		StateDir:     filepath.Join(dir, "state"),
		CaddySnippet: filepath.Join(dir, "user.caddy"),
		CaddyAdmin:   "unix/" + filepath.Join(dir, "none.sock"),
		Caddyfile:    filepath.Join(dir, "Caddyfile"),
		PreviewAddr:  taken.Addr().String(),
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- serveAPI(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("serveAPI: %v", err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + cfg.Addr + "/api/health")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("API did not start with the preview port taken: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body, _ := call(t, "POST", "http://"+cfg.Addr+"/api/expose", "Bearer "+e2eToken, `{"port":3000}`); code != 501 {
		t.Errorf("POST /api/expose with the preview port taken = %d %s, want 501", code, body)
	}
}
