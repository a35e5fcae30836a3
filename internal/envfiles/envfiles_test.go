package envfiles

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
)

var update = flag.Bool("update", false, "rewrite golden files")

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func mustSpec(t *testing.T, s string) []Entry {
	t.Helper()
	e, err := ParseSpec(s)
	if err != nil {
		t.Fatalf("ParseSpec(%q) = %v", s, err)
	}
	return e
}

func TestParseSpec(t *testing.T) {
	tests := []struct {
		spec, err string
	}{
		{`[]`, ""},
		{` [{"path":"a","keys":[{"key":"A","required":true}]}] `, ""},
		{`{`, "Invalid JSON in --spec: unexpected end of JSON input"},
		{`{"path":"a"}`, "--spec must be a JSON array"},
		{`"x"`, "--spec must be a JSON array"},
		{`null`, "--spec must be a JSON array"},
		{`[1]`, "Invalid JSON in --spec: json: cannot unmarshal number into Go value of type envfiles.Entry"},
	}
	for _, tc := range tests {
		_, err := ParseSpec(tc.spec)
		got := ""
		if err != nil {
			got = err.Error()
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Errorf("ParseSpec(%q) error %T, want *UsageError", tc.spec, err)
			}
		}
		if got != tc.err {
			t.Errorf("ParseSpec(%q) = %q, want %q", tc.spec, got, tc.err)
		}
	}
}

func TestPathRules(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target"), filepath.Join(ws, "file-link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		wp, path, err string
	}{
		{"", ".env", ""},
		{".", ".env", ""},
		{"apps/web", "config/.env.local", ""},
		{"/abs", ".env", "Path must be relative: /abs"},
		{"", "/etc/passwd", "Path must be relative: /etc/passwd"},
		{"..", ".env", "Path must not contain '..': .."},
		{"a/../b", ".env", "Path must not contain '..': a/../b"},
		{"", "../.env", "Path must not contain '..': ../.env"},
		{"", "x/../../y", "Path must not contain '..': x/../../y"},
		{"", "a..b/.env", ""},
		{"link", ".env", "Path escapes workspace: link"},
		{"", "link/.env", "Path escapes workspace: link/.env"},
		{"", "file-link", "Path escapes workspace: file-link"},
		{"", "", "Path escapes workspace: "},
	}
	for _, tc := range tests {
		_, err := resolve(ws, []Entry{{WorkspacePath: tc.wp, Path: tc.path}})
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.err {
			t.Errorf("resolve(%q, %q) = %q, want %q", tc.wp, tc.path, got, tc.err)
		}
	}
}

func TestApply(t *testing.T) {
	ws := t.TempDir()
	if err := os.MkdirAll(filepath.Join(ws, "apps/web/.git"), 0o755); err != nil {
		t.Fatal(err)
	}
	overrides := filepath.Join(t.TempDir(), "env.json")
	os.WriteFile(overrides, []byte(`{"A":"from-file","N":42,"Q":"q"}`), 0o600)
	o := Options{Workspace: ws, OverridesFile: overrides, Getenv: env(map[string]string{
		"A": "from-env", "N": "n-env", "B": "line1\nline2 \"quoted\" # not a comment = $HOME ",
		"OPT": "", "C": "plain=with=equals",
	})}
	spec := mustSpec(t, `[
		{"workspacePath":"apps/web","path":"config/.env.local","format":"dotenv","mode":"secret",
		 "keys":[{"key":"A","required":true},{"key":"N","required":true},{"key":"B"},{"key":"OPT"},{"key":"Q"}]},
		{"workspacePath":".","path":".env","mode":"plain","keys":[{"key":"C","required":true}]}
	]`)
	for range 2 {
		got, err := Apply(o, spec)
		if err != nil {
			t.Fatal(err)
		}
		// The old CLI's shape: each entry's own path, not joined with workspacePath.
		want := []Applied{{Path: "config/.env.local", KeyCount: 4}, {Path: ".env", KeyCount: 1}}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("Apply (-want +got):\n%s", d)
		}
	}
	file := filepath.Join(ws, "apps/web/config/.env.local")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "apply.env", b)
	parsed, err := Parse(string(b))
	if err != nil {
		t.Fatal(err)
	}
	wantVals := map[string]string{"A": "from-file", "N": "n-env", "B": o.Getenv("B"), "Q": "q"}
	if d := cmp.Diff(wantVals, parsed); d != "" {
		t.Errorf("values read back (-want +got):\n%s", d)
	}
	for _, f := range []string{file, filepath.Join(ws, ".env")} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode of %s = %v, want 0600", f, fi.Mode().Perm())
		}
	}
	excl, err := os.ReadFile(filepath.Join(ws, "apps/web/.git/info/exclude"))
	if err != nil {
		t.Fatal(err)
	}
	if string(excl) != "config/.env.local\n" {
		t.Errorf("exclude = %q, want the path once", excl)
	}
	if _, err := os.Stat(filepath.Join(ws, ".git")); err == nil {
		t.Error("apply created .git in a folder that is no repo")
	}
	leftovers, _ := filepath.Glob(filepath.Join(ws, "apps/web/config/.*.tmp*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left: %q", leftovers)
	}
}

func TestApplyExcludeKeepsExisting(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, ".git/info"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git/info/exclude"), []byte("# git ls-files --others\nnode_modules"), 0o644)
	o := Options{Workspace: ws, Getenv: env(map[string]string{"K": "v"})}
	spec := mustSpec(t, `[{"path":".env","keys":[{"key":"K"}]},{"path":"./.env","keys":[{"key":"K"}]}]`)
	for range 2 {
		if _, err := Apply(o, spec); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(filepath.Join(ws, ".git/info/exclude"))
	if want := "# git ls-files --others\nnode_modules\n.env\n"; string(got) != want {
		t.Errorf("exclude = %q, want %q", got, want)
	}
}

func TestApplyMissingWritesNothing(t *testing.T) {
	ws := t.TempDir()
	o := Options{Workspace: ws, OverridesFile: filepath.Join(ws, "missing.json"), Getenv: env(map[string]string{"A": "1"})}
	spec := mustSpec(t, `[
		{"path":"one/.env","keys":[{"key":"A","required":true}]},
		{"path":"two/.env","keys":[{"key":"Z","required":true},{"key":"B","required":true},{"key":"Z","required":true},{"key":"OPT"}]}
	]`)
	_, err := Apply(o, spec)
	var me *MissingError
	if !errors.As(err, &me) || err.Error() != "Missing required environment variables: Z, B" {
		t.Fatalf("Apply = %v, want the missing keys Z, B", err)
	}
	entries, _ := os.ReadDir(ws)
	if len(entries) != 0 {
		t.Errorf("workspace has %d entries after a failed apply, want none", len(entries))
	}
}

func TestOverridesFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content string
		want          string
	}{
		{"wins over env", `{"K":"file"}`, "file"},
		{"non-string ignored", `{"K":7}`, "env"},
		{"not JSON ignored", `{`, "env"},
		{"empty string wins", `{"K":""}`, ""},
	}
	for _, tc := range tests {
		f := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		os.WriteFile(f, []byte(tc.content), 0o600)
		ws := t.TempDir()
		_, err := Apply(Options{Workspace: ws, OverridesFile: f, Getenv: env(map[string]string{"K": "env"})},
			mustSpec(t, `[{"path":".env","keys":[{"key":"K","required":true}]}]`))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		b, _ := os.ReadFile(filepath.Join(ws, ".env"))
		if want := "K=" + tc.want + "\n"; string(b) != want {
			t.Errorf("%s: file = %q, want %q", tc.name, b, want)
		}
	}
	// An unreadable overrides file (a folder) is ignored.
	ws := t.TempDir()
	if _, err := Apply(Options{Workspace: ws, OverridesFile: dir, Getenv: env(map[string]string{"K": "env"})},
		mustSpec(t, `[{"path":".env","keys":[{"key":"K","required":true}]}]`)); err != nil {
		t.Errorf("Apply with an unreadable overrides file = %v", err)
	}
}

func TestScrub(t *testing.T) {
	ws := t.TempDir()
	overrides := filepath.Join(t.TempDir(), "env.json")
	os.WriteFile(overrides, []byte(`{}`), 0o600)
	for _, p := range []string{"s/.env", "p/.env"} {
		os.MkdirAll(filepath.Join(ws, filepath.Dir(p)), 0o755)
		os.WriteFile(filepath.Join(ws, p), []byte("K=v\n"), 0o600)
	}
	spec := mustSpec(t, `[
		{"workspacePath":"s","path":".env","mode":"secret"},
		{"workspacePath":"p","path":".env","mode":"plain"},
		{"path":"gone/.env","mode":"secret"}
	]`)
	got, err := Scrub(Options{Workspace: ws, OverridesFile: overrides}, spec)
	if err != nil {
		t.Fatal(err)
	}
	// The old CLI's shape: the entry's own path of each file actually deleted
	// (never the missing gone/.env), then the overrides file it deleted.
	if d := cmp.Diff([]string{".env", overrides}, got); d != "" {
		t.Errorf("Scrub (-want +got):\n%s", d)
	}
	if _, err := os.Stat(filepath.Join(ws, "s/.env")); !os.IsNotExist(err) {
		t.Errorf("secret file still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "p/.env")); err != nil {
		t.Errorf("plain file removed: %v", err)
	}
	if _, err := os.Stat(overrides); !os.IsNotExist(err) {
		t.Errorf("overrides file still there: %v", err)
	}
	got, err = Scrub(Options{Workspace: ws, OverridesFile: overrides}, spec)
	if err != nil || len(got) != 0 {
		t.Errorf("second Scrub = %q, %v; want nothing deleted and no error", got, err)
	}
}

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"a=b", "a=b"},
		{"$HOME", "$HOME"},
		{"with space", "with space"},
		{" lead", `" lead"`},
		{"trail ", `"trail "`},
		{"a\nb", `"a\nb"`},
		{`say "hi"`, `"say \"hi\""`},
		{"it's", `"it's"`},
		{"a#b", `"a#b"`},
		{`back\slash`, `"back\\slash"`},
		{"tab\there", `"tab\there"`},
		{"cr\r", `"cr\r"`},
	}
	for _, tc := range tests {
		if got := Quote(tc.in); got != tc.want {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	in := "# comment\n\nexport A=1\nB = spaced value  # trailing\nC='single # kept'\nD=\"multi\nline\"\nE=\nB2=x#y\n"
	got, err := Parse(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "1", "B": "spaced value", "C": "single # kept", "D": "multi\nline", "E": "", "B2": "x#y"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Parse (-want +got):\n%s", d)
	}
	for _, bad := range []string{"NOEQ\n", "=v\n", "A=\"open\n", "A='open\n"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", bad)
		}
	}
}

// FuzzQuoteRoundTrip: whatever the value, Line then Parse gives it back.
func FuzzQuoteRoundTrip(f *testing.F) {
	for _, s := range []string{"", "x", " a ", "a\nb", `"`, "'", "#", "=", "$X", `\`, "\r\n", "a # b", "é \t", "\"'#= \n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := Parse(Line("K", v) + Line("NEXT", "x"))
		if err != nil {
			t.Fatalf("Parse(Line(%q)) error %v", v, err)
		}
		if got["K"] != v || got["NEXT"] != "x" {
			t.Fatalf("Parse(Line(%q)) = %q, want the value back", v, got)
		}
	})
}

// FuzzParse: any input is parsed or refused, never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"A=1\n", "A=\"x\\\"y\"", "A='", "export B = c # d", "\r\n=\n", "A=\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = Parse(s)
	})
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	testutil.Golden(t, filepath.Join("testdata", name+".golden"), got, *update)
}

// FuzzSpec: any --spec is refused or resolves to files inside the workspace.
func FuzzSpec(f *testing.F) {
	for _, s := range []string{
		`[{"workspacePath":"a","path":".env","keys":[{"key":"K","required":true}]}]`,
		`[{"workspacePath":".","path":"./x/../y"}]`,
		`[{"path":"a//b/./c"}]`, `[{"path":"\\..\\x"}]`, `{}`, `[null]`, `[{"path":"x\u0000"}]`,
	} {
		f.Add(s)
	}
	ws := f.TempDir()
	f.Fuzz(func(t *testing.T, spec string) {
		entries, err := ParseSpec(spec)
		if err != nil {
			return
		}
		targets, err := resolve(ws, entries)
		if err != nil {
			return
		}
		for _, tg := range targets {
			if !within(ws, tg.file) || tg.file == ws || !within(ws, tg.dir) {
				t.Fatalf("spec %q resolved to %q (dir %q), outside %q", spec, tg.file, tg.dir, ws)
			}
		}
	})
}
