package caddyfile

import (
	"strings"
	"testing"
)

// FuzzRenderMain: whatever the addresses and paths, RenderMain either refuses
// them or renders a Caddyfile whose structure they cannot change (braces
// balanced, each value one token on its own line).
func FuzzRenderMain(f *testing.F) {
	f.Add(":20000", "127.0.0.1:4001", "/home/user/.proliferate/caddy/user.caddy", "/run/admin.sock")
	f.Add(":20000 {", "a}:1", "/x\n}", "/a b")
	f.Add("http://127.0.0.1:1", "[::1]:4001", "/x#y", "/s|0600")
	f.Fuzz(func(t *testing.T, site, preview, snippet, socket string) {
		o := DefaultMainOptions()
		o.Site, o.Preview, o.SnippetPath, o.AdminSocket = site, preview, snippet, socket
		b, err := RenderMain(o)
		if err != nil {
			return
		}
		s := string(b)
		if strings.Count(s, "{") != strings.Count(s, "}") {
			t.Fatalf("RenderMain(%q, %q, %q, %q) has unbalanced braces:\n%s", site, preview, snippet, socket, s)
		}
		for _, want := range []string{"\n    import " + snippet + "\n", "\n    admin unix/" + socket + "\n", "\n" + site + " {\n", "reverse_proxy " + preview + " "} {
			if !strings.Contains(s, want) {
				t.Fatalf("RenderMain(%q, %q, %q, %q) lacks %q:\n%s", site, preview, snippet, socket, want, s)
			}
		}
	})
}
