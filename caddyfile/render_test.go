package caddyfile

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestGolden(t *testing.T) {
	withDaemon := DefaultMainOptions()
	withDaemon.Daemon = "localhost:8470"
	tests := []struct {
		file   string
		render func() ([]byte, error)
	}{
		{"user.caddy", Snippet{Preview: DefaultPreview}.Render},
		{"user-custom-ports.caddy", Snippet{Preview: "127.0.0.1:14001", FallbackPorts: []int{8080}}.Render},
		{"Caddyfile", func() ([]byte, error) { return RenderMain(DefaultMainOptions()) }},
		{"Caddyfile-daemon", func() ([]byte, error) { return RenderMain(withDaemon) }},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := tt.render()
			if err != nil {
				t.Fatalf("render %s: %v", tt.file, err)
			}
			again, _ := tt.render()
			if string(got) != string(again) {
				t.Fatalf("render %s is not deterministic", tt.file)
			}
			testutil.Golden(t, filepath.Join("testdata", tt.file), got, *update)
		})
	}
}

// TestCaddyAdaptsGolden feeds the golden files to `caddy adapt`, with the
// import pointed at the golden snippet.
func TestCaddyAdaptsGolden(t *testing.T) {
	bin, err := exec.LookPath("caddy")
	if err != nil {
		t.Skip("caddy is not on PATH")
	}
	dir := t.TempDir()
	snippet, err := os.ReadFile("testdata/user.caddy")
	if err != nil {
		t.Fatal(err)
	}
	snipPath := filepath.Join(dir, "user.caddy")
	if err := os.WriteFile(snipPath, snippet, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"Caddyfile", "Caddyfile-daemon"} {
		t.Run(name, func(t *testing.T) {
			main, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			main = []byte(strings.ReplaceAll(string(main), DefaultSnippetPath, snipPath))
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, main, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "adapt", "--config", path, "--adapter", "caddyfile")
			cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("caddy adapt %s: %v\n%s", name, err, out)
			}
			for _, want := range []string{`"dial":"` + DefaultPreview + `"`, `"dial":"localhost:3000"`, `"dial":"localhost:3901"`, `"uri":"/api/auth/check"`, `"listen":"unix/` + DefaultAdminSocket + `"`} {
				if !strings.Contains(string(out), want) {
					t.Errorf("caddy adapt %s: JSON lacks %s:\n%s", name, want, out)
				}
			}
		})
	}
}

func TestRenderRejectsUnsafeOptions(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*MainOptions)
	}{
		{"empty site", func(o *MainOptions) { o.Site = "" }},
		{"site with brace", func(o *MainOptions) { o.Site = ":20000 {" }},
		{"relative snippet", func(o *MainOptions) { o.SnippetPath = "user.caddy" }},
		{"snippet with space", func(o *MainOptions) { o.SnippetPath = "/home/user/my snippet" }},
		{"unclean socket", func(o *MainOptions) { o.AdminSocket = "/run/../admin.sock" }},
		{"api without port", func(o *MainOptions) { o.API = "localhost" }},
		{"vscode port 0", func(o *MainOptions) { o.VSCode = "localhost:0" }},
		{"preview host with newline", func(o *MainOptions) { o.Preview = "a\nb:4001" }},
		{"daemon with brace", func(o *MainOptions) { o.Daemon = "}:80" }},
		{"bind to a name", func(o *MainOptions) { o.Bind = "localhost" }},
		{"fallback port 70000", func(o *MainOptions) { o.FallbackPorts = []int{3000, 70000} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultMainOptions()
			tt.modify(&o)
			if b, err := RenderMain(o); err == nil {
				t.Errorf("RenderMain(%+v) = %q, want an error", o, b)
			}
		})
	}
	if b, err := (Snippet{Preview: "127.0.0.1"}).Render(); err == nil {
		t.Errorf("Snippet{Preview: %q}.Render() = %q, want an error", "127.0.0.1", b)
	}
}
