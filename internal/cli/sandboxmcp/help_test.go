package sandboxmcp

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/internal/version"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Every help exits 0 on stdout and lists every setting the sidecar reads.
func TestHelpGolden(t *testing.T) {
	tests := []struct {
		golden string
		args   []string
	}{
		{"sandbox-mcp", []string{"--help"}},
		{"sandbox-mcp", []string{"help"}},
		{"sandbox-mcp_api", []string{"api", "--help"}},
		{"sandbox-mcp_mcp", []string{"mcp", "-h"}},
		{"sandbox-mcp_completion_bash", []string{"completion", "bash"}},
		{"sandbox-mcp_completion_zsh", []string{"completion", "zsh"}},
		{"sandbox-mcp_completion_fish", []string{"completion", "fish"}},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), tt.args, func(string) string { return "" }, strings.NewReader(""), &stdout, &stderr)
		if code != 0 || stderr.Len() != 0 {
			t.Errorf("run(%q) = %d, stderr %q; want 0 and nothing on stderr", tt.args, code, stderr.String())
		}
		if !strings.HasPrefix(tt.golden, "sandbox-mcp_completion") {
			for _, s := range config.Settings {
				if s.Server && !strings.Contains(stdout.String(), "  "+s.Env+"\n") {
					t.Errorf("run(%q) does not list %s", tt.args, s.Env)
				}
			}
		}
		testutil.Golden(t, filepath.Join("testdata", "help", tt.golden+".golden"), stdout.Bytes(), *update)
	}
}

func TestCompletionScriptsLoad(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	var stdout bytes.Buffer
	run(t.Context(), []string{"completion", "bash"}, func(string) string { return "" }, nil, &stdout, &bytes.Buffer{})
	script := stdout.String() + `
COMP_WORDS=(sandbox-mcp a); COMP_CWORD=1; _sandbox_mcp; echo "${COMPREPLY[@]}"
COMP_WORDS=(sandbox-mcp api --a); COMP_CWORD=2; _sandbox_mcp; echo "${COMPREPLY[@]}"
`
	out, err := exec.Command(bash, "-c", script).CombinedOutput()
	if err != nil || string(out) != "api\n--addr\n" {
		t.Errorf("bash completion = %q, %v; want api and --addr", out, err)
	}
}

func TestVersionCommand(t *testing.T) {
	want := "sandbox-mcp " + version.String() + "\n"
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, func(string) string { return "" }, nil, &stdout, &stderr); code != 0 || stdout.String() != want {
			t.Errorf("run(%q) = %d %q, want 0 %q", args, code, stdout.String(), want)
		}
	}
}

// Without a token the sidecar prints one export line a person can paste, with
// the URL it actually listens on, and /api/health names the version.
func TestGeneratedTokenHandOff(t *testing.T) {
	bin := sidecartest.Build(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "api", "--addr", "127.0.0.1:0")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "SANDBOX_MCP_STATE_DIR=" + filepath.Join(dir, "state"),
		"WORKSPACE_DIR=" + dir, "SANDBOX_MCP_PREVIEW_ADDR=127.0.0.1:0", "SANDBOX_MCP_CADDY_ADMIN=127.0.0.1:1",
		"SANDBOX_MCP_CADDY_SNIPPET=" + filepath.Join(dir, "user.caddy"), "SANDBOX_MCP_CADDYFILE=" + filepath.Join(dir, "Caddyfile")}
	stderr := &testutil.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	re := regexp.MustCompile(`(?m)^export SANDBOX_MCP_AUTH_TOKEN=([0-9a-f]{48}) PROLIFERATE_SANDBOX_MCP_URL=(http://127\.0\.0\.1:[0-9]+)$`)
	var m []string
	for deadline := time.Now().Add(15 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		m = re.FindStringSubmatch(stderr.String())
	}
	if m == nil {
		t.Fatalf("no export line on stderr:\n%s", stderr.String())
	}
	// The line works as printed: a shell that evals it reaches the API.
	script := m[0] + `; curl -sf -H "Authorization: Bearer $SANDBOX_MCP_AUTH_TOKEN" "$PROLIFERATE_SANDBOX_MCP_URL/api/auth/check" && curl -sf "$PROLIFERATE_SANDBOX_MCP_URL/api/health"`
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl")
	}
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	// The binary's own build, which is not this test's (go test stamps no VCS data).
	v, verr := exec.Command(bin, "--version").Output()
	if verr != nil {
		t.Fatal(verr)
	}
	want := `{"status":"ok"}` + "\n" + `{"status":"ok","version":"` + strings.TrimPrefix(strings.TrimSpace(string(v)), "sandbox-mcp ") + `"}`
	if err != nil || !strings.HasPrefix(string(out), want) {
		t.Errorf("curl with the printed line = %q, %v; want %q…", out, err, want)
	}
}
