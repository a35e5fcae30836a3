package gitpush

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
	"github.com/proliferate-ai/sandbox-mcp/sidecar"
)

// dirSize is the bytes of the regular files under dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Three refused pushes of 20 MiB each leave the mirror cache as it was: the
// objects waited in a quarantine that was dropped.
func TestRefusedPushesLeaveTheMirrorUnchanged(t *testing.T) {
	e := newEnv(t, Policy{})
	before := dirSize(t, e.cache)
	start := e.git("rev-parse", "HEAD")
	for i := range 3 {
		big := make([]byte, 20<<20)
		if _, err := rand.Read(big); err != nil {
			t.Fatal(err)
		}
		e.write("secrets/.env", string(big), 0o644)
		e.commit("a 20 MiB secret")
		_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
		wantRefused(t, err, RuleDenyGlob, "secrets/.env")
		e.git("reset", "-q", "--hard", start)
		after := dirSize(t, e.cache)
		t.Logf("mirror cache after refused push %d: %d bytes (before: %d)", i+1, after, before)
		if after != before {
			t.Errorf("mirror cache after refused push %d: %d bytes, want %d", i+1, after, before)
		}
	}
}

// Bundles that fsck or the path rules refuse never reach the remote.
func TestPushRefusesFsckAndPathErrors(t *testing.T) {
	e := newEnv(t, Policy{})
	before := e.remoteRefs()
	start := e.git("rev-parse", "HEAD")
	tests := []struct {
		name  string
		files map[string]string
		rule  string
		path  string
		want  string
	}{
		{"gitmodules URL starting with -", map[string]string{".gitmodules": gittest.BadGitmodules}, RuleBundle, "", "gitmodulesUrl"},
		{".GIT directory", map[string]string{".GIT/config": "[core]\n"}, RuleBundle, "", "hasDotgit"},
		{"git~1", map[string]string{"git~1/config": "[core]\n"}, RuleBundle, "", "hasDotgit"},
		// fsck knows only git~1; the path rules know every 8.3 form.
		{"git~2", map[string]string{"git~2/config": "[core]\n"}, RulePath, "git~2/config", ".git on some file system"},
		{"case-folded secret", map[string]string{"app/.ENV": "X=1\n"}, RuleDenyGlob, "app/.ENV", ".env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer e.git("reset", "-q", "--hard", start)
			gittest.CommitRaw(t, e.repo, tt.name, tt.files)
			_, err := e.m.Push(t.Context(), e.remote, e.session, e.sandboxBundle("origin/main"))
			wantRefused(t, err, tt.rule, tt.path)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Push = %v, want it to name %q", err, tt.want)
			}
			if got := e.remoteRefs(); got != before {
				t.Errorf("remote refs changed:\n%s\nwant\n%s", got, before)
			}
		})
	}
}

// A bundle whose pack declares a 10 GiB blob is refused on the declaration.
func TestPushRefusesZipBomb(t *testing.T) {
	e := newEnv(t, Policy{})
	head := e.git("rev-parse", "HEAD")
	var b bytes.Buffer
	b.WriteString("# v2 git bundle\n" + head + " refs/heads/main\n\n")
	b.WriteString("PACK\x00\x00\x00\x02\x00\x00\x00\x01")
	// A blob entry of 10 GiB: type 3, size 10<<30 as a pack varint.
	size := int64(10 << 30)
	entry := []byte{0x30 | byte(size&0x0f)}
	for size >>= 4; size > 0; size >>= 7 {
		entry[len(entry)-1] |= 0x80
		entry = append(entry, byte(size&0x7f))
	}
	b.Write(entry)
	b.WriteString("x\x9c") // the start of a zlib stream that never comes
	_, err := e.m.Push(t.Context(), e.remote, e.session, &b)
	wantRefused(t, err, RuleBundle, "")
	if err == nil || !strings.Contains(err.Error(), "10737418240 bytes") {
		t.Errorf("Push of a zip bomb = %v, want a refusal naming its declared size", err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.cache, "*.git", "objects", "sandbox-mcp-quarantine-*")); len(left) > 0 {
		t.Errorf("quarantines left behind: %q", left)
	}
	if _, err := os.Stat(e.cache); err != nil {
		t.Fatal(err)
	}
}

// A mirror past its cap is garbage-collected on its next use; one still past
// it is refused.
func TestMirrorCap(t *testing.T) {
	e := newEnv(t, Policy{})
	dir := e.m.mirrorDir(e.remote.URL)
	clean := dirSize(t, dir)
	// 2 MiB of unreachable objects, and an old quarantine ref holding 1 MiB.
	junk := make([]byte, 1<<20)
	for range 2 {
		rand.Read(junk)
		gittest.HashObject(t, dir, string(junk))
	}
	rand.Read(junk)
	held := gittest.HashObject(t, dir, string(junk))
	gittest.Git(t, dir, "update-ref", "refs/gitpush/left-over", strings.TrimSpace(gittest.Git(t, dir, "commit-tree", blobTree(t, dir, held), "-m", "x")))
	if got := dirSize(t, dir); got < clean+3<<20 {
		t.Fatalf("mirror with junk: %d bytes, want at least %d", got, clean+3<<20)
	}
	m, err := New(Options{CacheDir: e.cache, MaxMirrorBytes: clean + 512<<10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Update(t.Context(), e.remote); err != nil {
		t.Fatalf("Update of a mirror past its cap = %v, want it pruned", err)
	}
	if got := dirSize(t, dir); got > clean+512<<10 {
		t.Errorf("mirror after prune: %d bytes, want at most %d", got, clean+512<<10)
	}
	if out := gittest.Git(t, dir, "for-each-ref", "refs/gitpush/"); out != "" {
		t.Errorf("old quarantine refs left: %q", out)
	}
	small, err := New(Options{CacheDir: e.cache, MaxMirrorBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := small.Update(t.Context(), e.remote); err == nil || !strings.Contains(err.Error(), "over the 1024-byte cap") {
		t.Errorf("Update of a mirror that cannot fit its cap = %v, want a cap error", err)
	}
}

// blobTree is a tree holding the blob as "f".
func blobTree(t *testing.T, dir, blob string) string {
	t.Helper()
	cmd := exec.Command("git", "mktree")
	cmd.Dir, cmd.Env = dir, gittest.Env()
	cmd.Stdin = strings.NewReader("100644 blob " + blob + "\tf\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// The sandbox's sidecar (a real sandbox-mcp over HTTP) refuses a bundle with
// an fsck error with 400 Invalid bundle, and its repo keeps its refs.
func TestSidecarRefusesFsckErrors(t *testing.T) {
	e := newEnv(t, Policy{})
	up := t.TempDir()
	gittest.Git(t, up, "clone", "-q", e.repo, ".")
	gittest.CommitRaw(t, up, "evil", map[string]string{".gitmodules": gittest.BadGitmodules})
	f := filepath.Join(t.TempDir(), "evil.bundle")
	gittest.Git(t, up, "bundle", "create", "-q", f, "HEAD", "^"+e.base)
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	refs := e.git("for-each-ref")
	_, err = e.sc.GitApplyBundle(t.Context(), e.id, bytes.NewReader(data))
	var ae *sidecar.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || ae.Message != "Invalid bundle" {
		t.Fatalf("POST /api/git/bundle of a gitmodulesUrl bundle = %v, want 400 Invalid bundle", err)
	}
	if got := e.git("for-each-ref"); got != refs {
		t.Errorf("sandbox refs changed:\n%s\nwant\n%s", got, refs)
	}
}
