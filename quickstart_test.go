// Package quickstart holds tests that keep README.md true: its quick start runs
// verbatim in private namespaces, its settings table is the one
// internal/config prints, and its test command is the one .ci/run runs.
package quickstart

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
)

// testCommand is the README's test command; .ci/run runs exactly this.
const testCommand = "go test -race -count=1 ./..."

const skipMarker = "<!-- quickstart: skip -->"

type block struct {
	code string
	skip bool
}

// shellBlocks returns the README's ```sh blocks in order; a block right after
// the skip marker (blank lines allowed) is shown to readers but not run.
func shellBlocks(readme string) []block {
	var out []block
	lines := strings.Split(readme, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		skip := false
		for j := i - 1; j >= 0; j-- {
			if t := strings.TrimSpace(lines[j]); t != "" {
				skip = t == skipMarker
				break
			}
		}
		var code []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code = append(code, lines[i])
		}
		out = append(out, block{code: strings.Join(code, "\n"), skip: skip})
	}
	return out
}

func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestShellBlocks(t *testing.T) {
	md := "a\n\n```sh\none\n```\n" + skipMarker + "\n\n```sh\ntwo\nthree\n```\n```go\nx\n```\n"
	got := shellBlocks(md)
	if len(got) != 2 || got[0] != (block{"one", false}) || got[1] != (block{"two\nthree", true}) {
		t.Errorf("shellBlocks = %+v, want one (run) and two/three (skipped)", got)
	}
}

// The README's settings table is config.Settings, byte for byte.
func TestReadmeSettingsTable(t *testing.T) {
	md := readme(t)
	begin, end := "<!-- settings:begin -->\n", "<!-- settings:end -->"
	i, j := strings.Index(md, begin), strings.Index(md, end)
	if i < 0 || j < i {
		t.Fatalf("README.md lacks the %q … %q markers", begin, end)
	}
	var want bytes.Buffer
	config.WriteSettingsMarkdown(&want)
	if got := md[i+len(begin) : j]; got != want.String() {
		t.Errorf("README settings table differs from config.Settings; replace it with:\n%s", want.String())
	}
}

// The README's test command is the one .ci/run runs.
func TestReadmeTestCommandIsCI(t *testing.T) {
	found := false
	for _, b := range shellBlocks(readme(t)) {
		for _, l := range strings.Split(b.code, "\n") {
			if strings.TrimSpace(l) == testCommand {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("README.md has no shell line %q", testCommand)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains("\n"+string(ci)+"\n", "\n"+testCommand+"\n") {
		t.Errorf(".ci/run does not run the README's test command %q on a line of its own", testCommand)
	}
}

// TestQuickStart runs every shell block of the README not marked skip, in
// order, in one bash with `set -euo pipefail`, in a copy of the checkout,
// inside new user, network, PID and mount namespaces: port 4000 and the
// default state dir /tmp/proliferate are private to the run, and everything it
// started dies with the namespace.
func TestQuickStart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	for _, tool := range []string{"unshare", "ip", "curl", "python3", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	unshare := []string{"unshare", "--user", "--map-root-user", "--net", "--mount", "--pid", "--fork", "--kill-child"}
	if out, err := exec.Command(unshare[0], append(unshare[1:], "true")...).CombinedOutput(); err != nil {
		t.Skipf("cannot create namespaces here: %v %s", err, out)
	}
	var script strings.Builder
	script.WriteString("set -euo pipefail\nip link set lo up\nmount -t tmpfs tmpfs /tmp/proliferate\ncd \"$QUICKSTART_DIR\"\nset -x\n")
	ran := 0
	for _, b := range shellBlocks(readme(t)) {
		if !b.skip {
			script.WriteString(b.code + "\n")
			ran++
		}
	}
	if ran == 0 {
		t.Fatal("README.md has no quick start blocks to run")
	}
	// The mount point of the private state dir; creating the folder is harmless.
	if err := os.MkdirAll("/tmp/proliferate", 0o755); err != nil {
		t.Skipf("no /tmp/proliferate mount point: %v", err)
	}
	dir := copyCheckout(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare[0], append(unshare[1:], "bash", "-c", script.String())...)
	cmd.Env = append(cleanEnv(), "QUICKSTART_DIR="+dir, "GOPROXY=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README quick start failed: %v\n%s", err, out)
	}
	t.Logf("quick start output:\n%s", out)
	for _, want := range []string{`{"status":"ok","version":"`, "\n200\n", `"name":"web"`, `{"success":true}`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("quick start output lacks %q:\n%s", want, out)
		}
	}
}

// cleanEnv is this process's environment without the settings the quick
// start must find unset (it shows the defaults).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SANDBOX_MCP_") || strings.HasPrefix(k, "PROLIFERATE_") || k == "WORKSPACE_DIR" || k == "SERVICE_TO_SERVICE_AUTH_TOKEN" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// copyCheckout copies the working tree (not .git, bin, dist) into a temp dir,
// so the quick start's bin/ and sidecar.log land there.
func copyCheckout(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (p == ".git" || p == "bin" || p == "dist") {
			return filepath.SkipDir
		}
		if p == ".git" || p == "sidecar.log" {
			return nil
		}
		target := filepath.Join(dst, p)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}
