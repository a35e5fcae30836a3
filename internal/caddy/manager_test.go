package caddy

import (
	"context"
	"fmt"
	"github.com/proliferate-ai/sandbox-mcp/caddyfile"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/caddy/caddytest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

// oldCaddyfile is shaped like the Caddyfile of images that predate RenderMain:
// it imports the user snippet before a fallback that knows nothing of the
// preview proxy (here a fixed response), with an admin endpoint instead of
// `admin off`.
func oldCaddyfile(admin, site, snippet string) []byte {
	return []byte(fmt.Sprintf(`{
    admin %s
}

%s {
    bind 127.0.0.1
    import %s
    handle {
        respond "fallback"
    }
}
`, admin, site, snippet))
}

const previousSnippet = "# previous\nhandle {\n    respond \"previous\"\n}\n"

type fixture struct {
	site    string // host:port of the preview site
	snippet string
	preview string // preview proxy stand-in
	admin   string // as configured
	socket  string
	m       *Manager
	caddy   *caddytest.Caddy
}

// newFixture starts a preview stand-in and, when start is set, a Caddy on
// caddyfile(admin, site, snippet) with previousSnippet in the snippet file.
func newFixture(t *testing.T, start bool, tcpAdmin bool) *fixture {
	t.Helper()
	caddytest.Binary(t)
	dir := t.TempDir()
	f := &fixture{
		site:    caddytest.Addr(testutil.FreePort(t)),
		snippet: filepath.Join(dir, "snippets", "user.caddy"),
		socket:  caddytest.SocketPath(t),
	}
	f.admin = "unix/" + f.socket
	if tcpAdmin {
		f.admin = caddytest.Addr(testutil.FreePort(t))
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "preview")
	}))
	t.Cleanup(app.Close)
	f.preview = strings.TrimPrefix(app.URL, "http://")
	if err := os.MkdirAll(filepath.Dir(f.snippet), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.snippet, []byte(previousSnippet), 0o644); err != nil {
		t.Fatal(err)
	}
	main := oldCaddyfile(f.admin, "http://"+f.site, f.snippet)
	mainPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(mainPath, main, 0o644); err != nil {
		t.Fatal(err)
	}
	if start {
		ready := f.socket
		if tcpAdmin {
			ready = ""
		}
		f.caddy = startCaddy(t, dir, main, ready, f.site, f.admin)
	}
	m, err := New(Config{
		SnippetPath: f.snippet,
		Caddyfile:   mainPath,
		Admin:       f.admin,
		Snippet:     caddyfile.Snippet{Preview: f.preview},
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func startCaddy(t *testing.T, dir string, main []byte, socket, site, admin string) *caddytest.Caddy {
	t.Helper()
	if socket != "" {
		return caddytest.Start(t, dir, main, socket, site)
	}
	return caddytest.StartTCP(t, dir, main, admin, site)
}

var noKeepAlive = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func get(t *testing.T, url string) string {
	t.Helper()
	// A fresh connection each time: a keep-alive connection may still be
	// served by the configuration Caddy had before a load.
	resp, err := noKeepAlive.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnsureLoadsSnippetIntoOldCaddyfile(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		t.Run(fmt.Sprintf("tcp_admin=%v", tcp), func(t *testing.T) {
			f := newFixture(t, true, tcp)
			ctx := t.Context()
			if got := get(t, "http://"+f.site+"/"); got != "previous" {
				t.Fatalf("before Ensure: GET / = %q, want %q", got, "previous")
			}
			if routed, err := f.m.Routed(ctx); err != nil || routed {
				t.Fatalf("Routed() before Ensure = %v, %v; want false, nil", routed, err)
			}
			if err := f.m.Ensure(ctx); err != nil {
				t.Fatalf("Ensure() = %v", err)
			}
			if got := get(t, "http://"+f.site+"/"); got != "preview" {
				t.Errorf("after Ensure: GET / = %q, want %q", got, "preview")
			}
			want, _ := caddyfile.Snippet{Preview: f.preview}.Render()
			if got := readFile(t, f.snippet); got != string(want) {
				t.Errorf("snippet file = %q, want %q", got, want)
			}
			if routed, err := f.m.Routed(ctx); err != nil || !routed {
				t.Errorf("Routed() after Ensure = %v, %v; want true, nil", routed, err)
			}
			if err := f.m.Ensure(ctx); err != nil {
				t.Errorf("second Ensure() = %v", err)
			}
			if n := strings.Count(f.caddy.Log(), "load complete"); n != 1 {
				t.Errorf("Caddy loaded a config %d times, want once (the second Ensure must not reload)", n)
			}
		})
	}
}

// TestEnsureLeavesRenderedMainAlone: with RenderMain's Caddyfile the preview
// site already goes to the proxy, so Ensure neither writes nor loads.
func TestEnsureLeavesRenderedMainAlone(t *testing.T) {
	caddytest.Binary(t)
	dir := t.TempDir()
	socket := caddytest.SocketPath(t)
	snippet := filepath.Join(dir, "user.caddy")
	if err := os.WriteFile(snippet, []byte("# empty on purpose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	site := caddytest.Addr(testutil.FreePort(t))
	preview := caddytest.Addr(testutil.FreePort(t))
	main, err := caddyfile.RenderMain(caddyfile.MainOptions{
		Site: "http://" + site, Bind: "127.0.0.1", AdminSocket: socket, API: "127.0.0.1:1", VSCode: "127.0.0.1:2",
		SnippetPath: snippet, Preview: preview, FallbackPorts: []int{testutil.FreePort(t)},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := caddytest.Start(t, dir, main, socket, site)
	m, err := New(Config{
		SnippetPath: snippet, Caddyfile: c.Caddyfile, Admin: "unix/" + socket,
		Snippet: caddyfile.Snippet{Preview: preview}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(t.Context()); err != nil {
		t.Fatalf("Ensure() = %v", err)
	}
	if got := readFile(t, snippet); got != "# empty on purpose\n" {
		t.Errorf("snippet file = %q, want it untouched", got)
	}
	if strings.Contains(c.Log(), "load complete") {
		t.Errorf("Caddy reloaded:\n%s", c.Log())
	}
}

func TestFailedLoadKeepsPreviousSnippet(t *testing.T) {
	tests := []struct {
		name        string
		caddyUp     bool
		noValidate  bool
		snippet     string
		wantErr     string
		wantServing string
	}{
		{"caddy down", false, false, "", "reach caddy admin endpoint", ""},
		{"snippet rejected by caddy validate", true, false, "handle {\n    reverse_proxy localhost:3000 {\n        no_such_option\n    }\n}\n", "caddy rejected the snippet", "previous"},
		{"snippet refused by caddy load", true, true, "handle {\n    nonsense_directive\n}\n", "refused POST /load", "previous"},
		{"empty snippet", true, false, " \n", "empty snippet", "previous"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.caddyUp, false)
			if tt.noValidate {
				f.m.caddyBin = ""
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var err error
			if tt.snippet == "" {
				err = f.m.Ensure(ctx)
			} else {
				f.m.mu.Lock()
				err = f.m.apply(ctx, []byte(tt.snippet))
				f.m.mu.Unlock()
			}
			t.Logf("error: %v", err)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
			}
			if got := readFile(t, f.snippet); got != previousSnippet {
				t.Errorf("snippet file = %q, want the previous %q", got, previousSnippet)
			}
			if tt.wantServing != "" {
				if got := get(t, "http://"+f.site+"/"); got != tt.wantServing {
					t.Errorf("GET / = %q, want %q", got, tt.wantServing)
				}
			}
			entries, _ := os.ReadDir(filepath.Dir(f.snippet))
			if len(entries) != 1 {
				t.Errorf("snippet dir holds %d entries, want only the snippet (no temp files)", len(entries))
			}
		})
	}
}

// Validation works in a folder next to the snippet and removes it; a folder a
// killed sidecar left there is removed by the next validation once it is
// older than any validation runs, and a fresh one (another validation) stays.
func TestValidateCleansUpNextToSnippet(t *testing.T) {
	f := newFixture(t, false, false)
	dir := filepath.Dir(f.snippet)
	stale, fresh := filepath.Join(dir, validatePrefix+"stale"), filepath.Join(dir, validatePrefix+"fresh")
	for _, d := range []string{stale, fresh} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(os.TempDir())
	if err := f.m.validate(t.Context(), f.m.snippet); err != nil {
		t.Fatalf("validate of the rendered snippet: %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale %s still there (err %v)", stale, err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh %s removed: %v", fresh, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != filepath.Base(fresh) && e.Name() != filepath.Base(f.snippet) {
			t.Errorf("validation left %s next to the snippet", e.Name())
		}
	}
	after, _ := os.ReadDir(os.TempDir())
	for _, e := range after {
		if strings.HasPrefix(e.Name(), "sandbox-mcp-caddy-") && !slices.ContainsFunc(before, func(b os.DirEntry) bool { return b.Name() == e.Name() }) {
			t.Errorf("validation left %s in the temp dir", e.Name())
		}
	}
}
