package proliferate

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/envfiles"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
)

func TestEnvApplyScrub(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "repo/.git"), 0o755)
	overrides := filepath.Join(t.TempDir(), "overrides.json")
	os.WriteFile(overrides, []byte(`{"DB_URL":"postgres://file"}`), 0o600)
	env := map[string]string{"WORKSPACE_DIR": ws, "DB_URL": "postgres://env", "TOKEN": "a \"b\"\n#c = d "}
	withOverrides := func(f *Factory) { fast(f); f.OverridesFile = overrides }
	spec := `[{"workspacePath":"repo","path":"app/.env","format":"dotenv","mode":"secret","keys":[{"key":"DB_URL","required":true},{"key":"TOKEN","required":true},{"key":"OPTIONAL"}]}]`

	missing := `[{"path":"x/.env","keys":[{"key":"NOPE","required":true}]},` + spec[1:]
	r := cli(t, t.Context(), env, withOverrides, "env", "apply", "--spec", missing)
	if r.code != 1 || r.stderr != "Error: Missing required environment variables: NOPE\n" {
		t.Errorf("apply with a missing key = %d %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(ws, "repo/app")); !os.IsNotExist(err) {
		t.Errorf("apply with a missing key wrote files: %v", err)
	}

	for range 2 {
		r = cli(t, t.Context(), env, withOverrides, "env", "apply", "--spec="+spec)
		if r.code != 0 || r.stdout != `{"applied":[{"path":"app/.env","keyCount":2}]}`+"\n" {
			t.Fatalf("apply = %d %q %q", r.code, r.stdout, r.stderr)
		}
	}
	file := filepath.Join(ws, "repo/app/.env")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := envfiles.Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if vals["DB_URL"] != "postgres://file" || vals["TOKEN"] != env["TOKEN"] {
		t.Errorf("file read back %q, want the override and the exact token", vals)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	if excl, _ := os.ReadFile(filepath.Join(ws, "repo/.git/info/exclude")); string(excl) != "app/.env\n" {
		t.Errorf("exclude = %q, want the path once", excl)
	}

	r = cli(t, t.Context(), env, withOverrides, "env", "scrub", "--spec", spec)
	if r.code != 0 || r.stdout != `{"scrubbed":["app/.env",`+strconv.Quote(overrides)+`]}`+"\n" {
		t.Errorf("scrub = %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, f := range []string{file, overrides} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("%s still exists after scrub", f)
		}
	}
}

func TestEnvEscapingPath(t *testing.T) {
	ws := t.TempDir()
	os.Symlink(t.TempDir(), filepath.Join(ws, "out"))
	env := map[string]string{"WORKSPACE_DIR": ws, "K": "v"}
	r := cli(t, t.Context(), env, func(f *Factory) { f.OverridesFile = filepath.Join(ws, "none.json") },
		"env", "apply", "--spec", `[{"workspacePath":"out","path":".env","keys":[{"key":"K"}]}]`)
	if r.code != 2 || r.stderr != "Error: Path escapes workspace: out\n" {
		t.Errorf("apply through a symlink out of the workspace = %d %q", r.code, r.stderr)
	}
}

// Without WORKSPACE_DIR the CLI resolves the workspace as the sidecar does: the
// default when it exists, else the working directory; it never creates the
// default (an earlier version did, and every later sidecar then used it).
func TestEnvWithoutWorkspaceDirUsesCwd(t *testing.T) {
	if _, err := os.Stat(config.DefaultWorkspaceDir); err == nil {
		t.Skipf("%s exists on this machine", config.DefaultWorkspaceDir)
	}
	cwd := t.TempDir()
	t.Chdir(cwd)
	env := map[string]string{"K": "v"}
	overrides := func(f *Factory) { f.OverridesFile = filepath.Join(cwd, "none.json") }
	r := cli(t, t.Context(), env, overrides, "env", "apply", "--spec", `[{"path":".env","mode":"secret","keys":[{"key":"K"}]}]`)
	if r.code != 0 || r.stdout != `{"applied":[{"path":".env","keyCount":1}]}`+"\n" {
		t.Fatalf("apply = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, ".env")); err != nil || string(b) != "K=v\n" {
		t.Errorf("cwd/.env = %q, %v; want K=v", b, err)
	}
	if _, err := os.Stat(config.DefaultWorkspaceDir); !os.IsNotExist(err) {
		t.Errorf("env apply created %s (stat: %v)", config.DefaultWorkspaceDir, err)
	}
	r = cli(t, t.Context(), env, overrides, "env", "scrub", "--spec", `[{"path":".env","mode":"secret"},{"path":"never/.env","mode":"secret"}]`)
	if r.code != 0 || r.stdout != `{"scrubbed":[".env"]}`+"\n" {
		t.Errorf("scrub = %d %q %q; want only the file that existed", r.code, r.stdout, r.stderr)
	}
}
