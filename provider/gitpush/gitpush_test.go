package gitpush

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/internal/sidecartest"
	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

const testToken = "tok-3f9a1c77e2"

var sidecarBin string

func TestMain(m *testing.M) {
	for _, kv := range gittest.Env() {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "GIT_") {
			os.Setenv(k, v)
		}
	}
	dir, err := os.MkdirTemp("", "gitpush-test-")
	if err != nil {
		panic(err)
	}
	sidecarBin = filepath.Join(dir, "sandbox-mcp")
	if err := testutil.BuildCommands(dir, "sandbox-mcp"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's world: a token-protected remote, the host's mirrors, and
// a sandbox (a real sidecar) whose workspace holds a tokenless clone.
type env struct {
	t       *testing.T
	srv     *gittest.Server
	remote  Remote
	m       *Mirrors
	cache   string
	sc      *sidecar.Client
	repo    string // the clone inside the sandbox's workspace
	id      string
	base    string // the remote's main when the sandbox was made
	session string
}

func newEnv(t *testing.T, policy Policy) *env {
	t.Helper()
	e := &env{t: t, srv: gittest.New(t, testToken), cache: t.TempDir(), session: "s-" + strings.ToLower(t.Name()[4:12])}
	url := e.srv.CreateRepo(t, "app", map[string]string{"README.md": "hello\n", "old-name.txt": "rename me\n", "run.sh": "echo hi\n"})
	e.remote = Remote{URL: url, Token: testToken}
	var err error
	e.m, err = New(Options{CacheDir: e.cache, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	sc := sidecartest.Start(t, sidecarBin)
	e.sc, err = sidecar.New(sidecar.Options{BaseURL: sc.URL, Token: sidecartest.Token})
	if err != nil {
		t.Fatal(err)
	}
	// The boot: a bundle from the host, cloned inside without a credential.
	var b bytes.Buffer
	res, err := e.m.Bundle(t.Context(), e.remote, "", nil, &b)
	if err != nil {
		t.Fatal(err)
	}
	e.base = res.SHA
	f := filepath.Join(t.TempDir(), "boot.bundle")
	if err := os.WriteFile(f, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	e.repo = filepath.Join(sc.Workspace, "app")
	gittest.Git(t, sc.Workspace, "clone", "-q", "-b", res.Branch, f, e.repo)
	gittest.Git(t, e.repo, "remote", "set-url", "origin", url)
	e.id = base64.StdEncoding.EncodeToString([]byte(e.repo))
	return e
}

// git runs git in the sandbox's clone, as the agent would.
func (e *env) git(args ...string) string {
	e.t.Helper()
	return strings.TrimSpace(gittest.Git(e.t, e.repo, args...))
}

func (e *env) write(name, content string, mode fs.FileMode) {
	e.t.Helper()
	p := filepath.Join(e.repo, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) commit(msg string) string {
	e.t.Helper()
	e.git("add", "-A")
	e.git("commit", "-q", "-m", msg)
	return e.git("rev-parse", "HEAD")
}

// sandboxBundle asks the sidecar for the branch since base.
func (e *env) sandboxBundle(base string) *bytes.Buffer {
	e.t.Helper()
	var b bytes.Buffer
	if _, err := e.sc.GitBundle(e.t.Context(), e.id, base, &b); err != nil {
		e.t.Fatalf("GitBundle since %s: %v", base, err)
	}
	return &b
}

// remoteRefs lists every ref of the remote with its commit.
func (e *env) remoteRefs() string {
	e.t.Helper()
	return gittest.Git(e.t, e.srv.Dir("app"), "for-each-ref", "--format=%(refname) %(objectname)")
}

func (e *env) target() string { return "refs/heads/session/" + e.session }

func TestPushRoundTripKeepsBinaryRenameModeAndSymlink(t *testing.T) {
	e := newEnv(t, Policy{})
	e.write("logo.bin", "\x00\x01\x02\xff\xfe binary\x00", 0o644)
	e.git("mv", "old-name.txt", "new-name.txt")
	if err := os.Chmod(filepath.Join(e.repo, "run.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("README.md", filepath.Join(e.repo, "link")); err != nil {
		t.Fatal(err)
	}
	head := e.commit("binary, rename, exec bit, symlink")

	res, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA != head || res.Ref != e.target() || res.Old != "" || res.Commits != 1 {
		t.Errorf("Push = %+v, want sha %s on %s, 1 commit", res, head, e.target())
	}
	if got := e.srv.Rev(t, "app", e.target()); got != head {
		t.Fatalf("remote %s = %q, want %s", e.target(), got, head)
	}
	remoteDiff := gittest.Git(t, e.srv.Dir("app"), "diff", "--binary", "-M", "--raw", "-p", e.base, e.target())
	localDiff := gittest.Git(t, e.repo, "diff", "--binary", "-M", "--raw", "-p", e.base, "HEAD")
	if remoteDiff != localDiff {
		t.Errorf("remote diff differs from the sandbox's:\n%s\n---\n%s", remoteDiff, localDiff)
	}
	for _, want := range []string{"R100\told-name.txt\tnew-name.txt", ":100644 100755", ":000000 120000", "GIT binary patch"} {
		if !strings.Contains(remoteDiff, want) {
			t.Errorf("remote diff lacks %q:\n%s", want, remoteDiff)
		}
	}
	if got := e.srv.Rev(t, "app", "refs/heads/main"); got != e.base {
		t.Errorf("remote main moved to %s", got)
	}
	assertNoToken(t, e.cache)
	assertNoToken(t, e.repo)

	// A second push fast-forwards; the same bundle again is up to date.
	e.write("more.txt", "more\n", 0o644)
	head2 := e.commit("more")
	res, err = e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
	if err != nil || res.SHA != head2 || res.Old != head {
		t.Fatalf("second Push = %+v, %v; want %s over %s", res, err, head2, head)
	}
	res, err = e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
	if err != nil || !res.UpToDate {
		t.Errorf("repeated Push = %+v, %v; want up to date", res, err)
	}
}

// assertNoToken fails when any file under dir contains the token.
func assertNoToken(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(testToken)) {
			t.Errorf("%s contains the token", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func wantRefused(t *testing.T, err error, rule, path string) {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want *RefusedError", err)
	}
	for _, r := range re.Refusals {
		if r.Rule == rule && r.Path == path {
			if r.Detail == "" {
				t.Errorf("refusal %+v has no detail", r)
			}
			return
		}
	}
	t.Errorf("refusals %+v lack rule %q path %q (error: %v)", re.Refusals, rule, path, err)
}

func TestPushRefusals(t *testing.T) {
	e := newEnv(t, Policy{MaxFileBytes: 4 << 10, MaxTotalBytes: 10 << 10})
	before := e.remoteRefs()
	unchanged := func(what string) {
		t.Helper()
		if got := e.remoteRefs(); got != before {
			t.Errorf("%s: remote refs changed:\n%s\nwant\n%s", what, got, before)
		}
	}
	start := e.git("rev-parse", "HEAD")
	reset := func() { e.git("reset", "-q", "--hard", start) }

	t.Run("deny globs", func(t *testing.T) {
		defer reset()
		e.write(".env", "SECRET=1\n", 0o644)
		e.write("certs/server.pem", "-----BEGIN-----\n", 0o644)
		e.write("home/id_rsa.pub", "ssh-rsa AAA\n", 0o644)
		e.write("config/.env.local", "X=1\n", 0o644)
		e.write("ok.txt", "fine\n", 0o644)
		e.commit("secrets")
		_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
		for _, p := range []string{".env", "certs/server.pem", "home/id_rsa.pub", "config/.env.local"} {
			wantRefused(t, err, RuleDenyGlob, p)
		}
		if strings.Contains(err.Error(), "ok.txt") {
			t.Errorf("ok.txt refused: %v", err)
		}
		unchanged("deny globs")
	})
	t.Run("secret added then deleted", func(t *testing.T) {
		defer reset()
		e.write(".env", "SECRET=1\n", 0o644)
		e.commit("add secret")
		e.git("rm", "-q", ".env")
		e.commit("remove secret")
		_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
		wantRefused(t, err, RuleDenyGlob, ".env")
		unchanged("history secret")
	})
	t.Run("blob over the cap", func(t *testing.T) {
		defer reset()
		e.write("big.dat", strings.Repeat("x", 5<<10), 0o644)
		e.commit("big")
		_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
		wantRefused(t, err, RuleFileSize, "big.dat")
		unchanged("blob cap")
	})
	t.Run("total over the cap", func(t *testing.T) {
		defer reset()
		for i := range 4 {
			e.write(fmt.Sprintf("part%d.txt", i), strings.Repeat(fmt.Sprint(i), 3<<10), 0o644)
		}
		e.commit("parts")
		_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
		wantRefused(t, err, RuleTotalSize, "")
		unchanged("total cap")
	})
	t.Run("prerequisite the mirror lacks", func(t *testing.T) {
		defer reset()
		e.write("a.txt", "local only\n", 0o644)
		local := e.commit("never pushed")
		e.write("b.txt", "on top\n", 0o644)
		e.commit("on top")
		_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle(local))
		wantRefused(t, err, RulePrerequisite, "")
		if !strings.Contains(err.Error(), local) {
			t.Errorf("error does not name the missing commit %s: %v", local, err)
		}
		unchanged("prerequisite")
	})
	t.Run("bundle claiming main goes to the session branch", func(t *testing.T) {
		defer reset()
		e.write("feature.txt", "f\n", 0o644)
		head := e.commit("feature")
		f := filepath.Join(t.TempDir(), "main.bundle")
		e.git("bundle", "create", "-q", f, "refs/heads/main", "^"+e.base)
		data, _ := os.ReadFile(f)
		res, err := e.m.Push(t.Context(), e.remote, e.session, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if res.Ref != e.target() || e.srv.Rev(t, "app", e.target()) != head {
			t.Errorf("Push = %+v; remote %s = %s, want %s", res, e.target(), e.srv.Rev(t, "app", e.target()), head)
		}
		if got := e.srv.Rev(t, "app", "refs/heads/main"); got != e.base {
			t.Errorf("remote main moved to %s", got)
		}
		before = e.remoteRefs()
	})
	t.Run("force push", func(t *testing.T) {
		defer reset()
		e.write("other.txt", "a different line\n", 0o644)
		e.commit("diverging")
		_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
		wantRefused(t, err, RuleFastForward, "")
		unchanged("force")
	})
	t.Run("tags and several refs", func(t *testing.T) {
		defer reset()
		e.write("t.txt", "t\n", 0o644)
		e.commit("tagged")
		e.git("tag", "v9")
		e.git("tag", "-a", "-m", "annotated", "v9a")
		for _, refs := range [][]string{{"refs/tags/v9"}, {"refs/tags/v9a"}, {"refs/heads/main", "refs/tags/v9"}} {
			f := filepath.Join(t.TempDir(), "t.bundle")
			e.git(append([]string{"bundle", "create", "-q", f}, append(refs, "^"+e.base)...)...)
			data, _ := os.ReadFile(f)
			_, err := e.m.Push(t.Context(), e.remote, e.session, bytes.NewReader(data))
			wantRefused(t, err, RuleBundle, "")
		}
		if out := gittest.Git(t, e.srv.Dir("app"), "tag", "-l"); out != "" {
			t.Errorf("remote has tags %q", out)
		}
		unchanged("tags")
	})
	t.Run("garbage bundle", func(t *testing.T) {
		_, err := e.m.Push(t.Context(), e.remote, e.session, strings.NewReader("# v2 git bundle\nnope\n"))
		wantRefused(t, err, RuleBundle, "")
		unchanged("garbage")
	})
}

func TestSyncBringsOriginUpToDate(t *testing.T) {
	e := newEnv(t, Policy{})
	upstream := e.srv.Commit(t, "app", "main", "upstream work", map[string]string{"up.txt": "new\n"})
	have := e.git("rev-parse", "origin/main")
	var b bytes.Buffer
	res, err := e.m.Bundle(t.Context(), e.remote, "main", []string{have}, &b)
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA != upstream {
		t.Errorf("Bundle sha %s, want %s", res.SHA, upstream)
	}
	up, err := e.sc.GitApplyBundle(t.Context(), e.id, &b)
	if err != nil {
		t.Fatal(err)
	}
	if len(up) != 1 || up[0].New != upstream || up[0].Old != have {
		t.Errorf("applied %+v", up)
	}
	if got := e.git("rev-parse", "origin/main"); got != upstream {
		t.Errorf("sandbox origin/main = %s, want %s", got, upstream)
	}
	if got := e.git("rev-parse", "main"); got != have {
		t.Errorf("sandbox main moved to %s", got)
	}
	if _, err := e.m.Bundle(t.Context(), e.remote, "main", []string{upstream}, &b); !errors.Is(err, ErrUpToDate) {
		t.Errorf("Bundle with the tip in haves = %v, want ErrUpToDate", err)
	}
	if _, err := e.m.Bundle(t.Context(), e.remote, "nope", nil, &b); !errors.Is(err, ErrNoBranch) {
		t.Errorf("Bundle of a missing branch = %v, want ErrNoBranch", err)
	}
	assertNoToken(t, e.repo)
	assertNoToken(t, e.cache)
}

func TestWrongTokenFailsWithoutLeaking(t *testing.T) {
	srv := gittest.New(t, testToken)
	url := srv.CreateRepo(t, "app", map[string]string{"a": "a"})
	m, err := New(Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Update(t.Context(), Remote{URL: url, Token: "wrong-secret-value"})
	if err == nil || strings.Contains(err.Error(), "wrong-secret-value") {
		t.Errorf("Update with a wrong token = %v, want an error without the token", err)
	}
	for _, bad := range []string{"https://user:pw@example.com/r.git", "file:///etc", "ext::sh -c x", "https://example.com/r?x=1"} {
		if _, err := m.Update(t.Context(), Remote{URL: bad}); err == nil || strings.Contains(err.Error(), "pw") {
			t.Errorf("Update(%q) = %v, want a refusal", bad, err)
		}
	}
}

func TestTargetRef(t *testing.T) {
	for id, ok := range map[string]bool{
		"abc": true, "sess_01.x-Y": true,
		"": false, "../main": false, "a/b": false, "a..b": false, "-x": false, "a.lock": false, "a b": false,
		"x.": false, strings.Repeat("a", 200): false,
	} {
		ref, err := TargetRef(id)
		if (err == nil) != ok {
			t.Errorf("TargetRef(%q) = %q, %v; want ok=%v", id, ref, err, ok)
		}
		if ok && ref != "refs/heads/session/"+id {
			t.Errorf("TargetRef(%q) = %q", id, ref)
		}
	}
}

func TestPolicyDenied(t *testing.T) {
	p, err := Policy{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ file, want string }{
		{".env", ".env"},
		{"a/.env", ".env"},
		{".ENV", ".env"},
		{"deep/dir/.Env", ".env"},
		{".env.prod", ".env.*"},
		{".ENV.Local", ".env.*"},
		{".envrc", ".envrc"},
		{"x.pem", "*.pem*"},
		{"X.PEM", "*.pem*"},
		{"a.pem.txt", "*.pem*"},
		{"a.pem.bak", "*.pem*"},
		{"server.key", "*.key"},
		{"k/id_rsa", "id_rsa*"},
		{"id_rsa.pub", "id_rsa*"},
		{"ID_ED25519", "id_ed25519*"},
		{".ssh/id_ecdsa", "id_ecdsa*"},
		{"id_dsa", "id_dsa*"},
		{".npmrc", ".npmrc"},
		{"home/.netrc", ".netrc"},
		{".git-credentials", ".git-credentials"},
		{"gcp/credentials.json", "credentials.json"},
		{"notes.txt ", "* "},
		{"config/secrets.yaml", "secrets.yaml"},
		{"Secrets.YML", "secrets.yml"},
		{"home/.aws/credentials", "**/.aws/credentials"},
		{".aws/credentials", "**/.aws/credentials"},
		{".AWS/Credentials", "**/.aws/credentials"},
		{"aws/credentials", ""},
		{".pgpass", ".pgpass"},
		{"u/.docker/config.json", "**/.docker/config.json"},
		{".docker/config.json", "**/.docker/config.json"},
		{"config.json", ""},
		{"infra/terraform.tfstate", "*.tfstate"},
		{"terraform.tfstate.backup", "*.tfstate.backup"},
		{"www/.htpasswd", ".htpasswd"},
		{"service-account.json", "service-account*.json"},
		{"gcp/service-account-prod.json", "service-account*.json"},
		{"cert.p12", "*.p12"},
		{"CERT.P12", "*.p12"},
		{"store.jks", "*.jks"},
		{"android/release.keystore", "*.keystore"},
		{"win.pfx", "*.pfx"},
		{"home/.kube/config", "**/.kube/config"},
		{".kube/config", "**/.kube/config"},
		{"kube/config", ""},
		{"\uff0e\uff45\uff4e\uff56", ".env"},        // fullwidth ．ｅｎｖ
		{".\uff45\uff4e\uff56", ".env"},             // fullwidth ｅｎｖ
		{".env\u200b", ".env"},                      // zero-width space
		{".e\u200cn\u200dv", ".env"},                // zero-width joiners
		{"\ufeff.env", ".env"},                      // byte-order mark
		{".env\u2060", ".env"},                      // word joiner
		{".env\u00ad", ".env"},                      // soft hyphen
		{".env\ufe0f", ".env"},                      // variation selector
		{".\u202eenv", ".env"},                      // bidi override
		{"id_\u0280sa", ""},                         // a lookalike letter is not folded
		{"\u2024env", ".env"},                       // one dot leader is NFKC "."
		{".\U0001d41e\U0001d427\U0001d42f", ".env"}, // mathematical bold env
		{"server.\u212aey", "*.key"},                // Kelvin sign
		{".kube\u200b/config", "**/.kube/config"},   // in a directory name
		{"s/\uff53\uff45\uff43\uff52\uff45\uff54\uff53.yaml", "secrets.yaml"},
		{"env.txt", ""},
		{"keys.go", ""},
		{"README.md", ""},
		{"environment.ts", ""},
	}
	for _, tt := range tests {
		if got := p.Denied(tt.file); got != tt.want {
			t.Errorf("Denied(%q) = %q, want %q", tt.file, got, tt.want)
		}
	}
	p2, _ := Policy{DenyGlobs: []string{"secrets/*"}}.withDefaults()
	if p2.Denied("secrets/a") != "secrets/*" || p2.Denied("x/secrets/a") != "" || p2.Denied(".env") != "" {
		t.Error("path glob misapplied")
	}
	if _, err := (Policy{DenyGlobs: []string{"["}}).withDefaults(); err == nil {
		t.Error("bad glob accepted")
	}
	if _, err := (Policy{DenyGlobs: []string{"**/["}}).withDefaults(); err == nil {
		t.Error("bad ** glob accepted")
	}
}

// FuzzDenied: the deny check never panics, folding is idempotent, and a name
// the default list denies stays denied in every spelling that reads the same:
// upper case, invisible characters between its letters, fullwidth letters.
func FuzzDenied(f *testing.F) {
	for _, s := range []string{".env", "a/.env", ".aws/credentials", "x/.kube/config", "cert.p12", "README.md",
		"\uff0e\uff45\uff4e\uff56", ".env\u200b", "id_rsa.pub", "a/b/c", "", "/", "**/x", "\xff\xfe"} {
		f.Add(s, uint8(1))
	}
	p, err := Policy{}.withDefaults()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string, at uint8) {
		folded := FoldName(name)
		if again := FoldName(folded); again != folded {
			t.Fatalf("FoldName(FoldName(%q)) = %q, want %q", name, again, folded)
		}
		g := p.Denied(name)
		if g == "" || !utf8.ValidString(name) {
			return
		}
		for _, v := range []string{strings.ToUpper(name), insertAt(name, int(at), "\u200b"), insertAt(name, int(at), "\ufeff"), fullwidth(name)} {
			if p.Denied(v) == "" {
				t.Errorf("Denied(%q) = %q but Denied(%q) = \"\"", name, g, v)
			}
		}
	})
}

// insertAt puts ins before the rune at index i (modulo the name's length) of s.
func insertAt(s string, i int, ins string) string {
	r := []rune(s)
	i %= len(r) + 1
	return string(r[:i]) + ins + string(r[i:])
}

// fullwidth spells s's ASCII letters, digits and dots in their fullwidth forms.
func fullwidth(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= '!' && r <= '~' && r != '/' && r != '*' {
			return r - '!' + '\uff01'
		}
		return r
	}, s)
}

// PushSandbox and SyncSandbox drive a sandbox through its sidecar only.
func TestPushSandboxAndSyncSandbox(t *testing.T) {
	e := newEnv(t, Policy{})
	// Nothing committed yet: nothing to push.
	res, err := e.m.PushSandbox(t.Context(), e.sc, e.id, e.remote, e.session)
	if err != nil || !res.UpToDate {
		t.Fatalf("PushSandbox with no work = %+v, %v; want up to date", res, err)
	}
	e.write("work.txt", "agent work\n", 0o644)
	first := e.commit("agent work")
	res, err = e.m.PushSandbox(t.Context(), e.sc, e.id, e.remote, e.session)
	if err != nil || res.SHA != first || e.srv.Rev(t, "app", e.target()) != first {
		t.Fatalf("PushSandbox = %+v, %v; want %s on the remote", res, err, first)
	}
	e.write("work.txt", "more agent work\n", 0o644)
	second := e.commit("more")
	res, err = e.m.PushSandbox(t.Context(), e.sc, e.id, e.remote, e.session)
	if err != nil || res.SHA != second || res.Old != first || res.Commits != 1 {
		t.Fatalf("second PushSandbox = %+v, %v; want %s over %s, 1 commit", res, err, second, first)
	}
	res, err = e.m.PushSandbox(t.Context(), e.sc, e.id, e.remote, e.session)
	if err != nil || !res.UpToDate || res.SHA != second {
		t.Errorf("repeated PushSandbox = %+v, %v", res, err)
	}
	e.write(".env", "X=1\n", 0o644)
	e.commit("secret")
	if _, err := e.m.PushSandbox(t.Context(), e.sc, e.id, e.remote, e.session); err == nil {
		t.Error("PushSandbox pushed a .env")
	} else {
		wantRefused(t, err, RuleDenyGlob, ".env")
	}

	sr, err := e.m.SyncSandbox(t.Context(), e.sc, e.id, e.remote)
	if err != nil || !sr.UpToDate {
		t.Errorf("SyncSandbox before the remote moved = %+v, %v; want up to date", sr, err)
	}
	upstream := e.srv.Commit(t, "app", "main", "upstream", map[string]string{"up.txt": "u\n"})
	sr, err = e.m.SyncSandbox(t.Context(), e.sc, e.id, e.remote)
	if err != nil || sr.SHA != upstream || len(sr.Updated) != 1 {
		t.Fatalf("SyncSandbox = %+v, %v", sr, err)
	}
	if got := e.git("rev-parse", "origin/main"); got != upstream {
		t.Errorf("sandbox origin/main = %s, want %s", got, upstream)
	}
	assertNoToken(t, e.repo)
}

// A git that writes a lot to stderr and succeeds is a success: stderr is kept
// for messages (its first 8 KiB), never a limit that fails the command.
func TestChattyGitSucceeds(t *testing.T) {
	dir := t.TempDir()
	chatty := filepath.Join(dir, "chatty-git")
	script := "#!/bin/sh\nhead -c 100000 /dev/zero | tr '\\0' x >&2\necho ok\n"
	if err := os.WriteFile(chatty, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{CacheDir: filepath.Join(dir, "cache"), Git: chatty})
	if err != nil {
		t.Fatal(err)
	}
	out, err := m.run(t.Context(), dir, nil, nil, "status")
	if err != nil || string(out) != "ok\n" {
		t.Errorf("run of a chatty git = %q, %v; want %q, nil", out, err, "ok\n")
	}
}
