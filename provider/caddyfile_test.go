package provider

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCaddyAdaptsBootFiles runs the real caddy over the Caddyfile and snippet
// the boot plan writes (skipped only when no caddy binary is installed).
func TestCaddyAdaptsBootFiles(t *testing.T) {
	bin, err := exec.LookPath("caddy")
	if err != nil {
		t.Skip("caddy not on PATH; .ci/run installs it")
	}
	p := RootedPaths(t.TempDir())
	caddyfile, err := defaultCaddyfile(p)
	if err != nil {
		t.Fatal(err)
	}
	snippet, err := defaultSnippet()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(snippet) == "" {
		t.Fatal("default snippet is empty; Caddy 2.6 refuses a 0-byte import")
	}
	if err := os.MkdirAll(p.UserCaddyDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.UserCaddyFile(), []byte(snippet), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.Caddyfile(), []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "adapt", "--config", p.Caddyfile(), "--adapter", "caddyfile").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy adapt %s: %v\n%s", filepath.Base(p.Caddyfile()), err, out)
	}
	for _, want := range []string{`"dial":"127.0.0.1:4001"`, `"dial":"localhost:3901"`, `"uri":"/api/auth/check"`, `"dial":"localhost:8470"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("adapted config lacks %s", want)
		}
	}
}
