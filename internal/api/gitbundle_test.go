package api

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/gitrepo"
)

func gitOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

// bundleServer serves a workspace whose root repo has a base commit and one
// more; it returns the server URL, the workspace and the base commit.
func bundleServer(t *testing.T, maxBundle int64) (string, string, string) {
	t.Helper()
	gitEnv(t)
	ws := t.TempDir()
	runGit(t, ws, "init", "-q", "-b", "main")
	write(t, filepath.Join(ws, "a.txt"), "a\n")
	runGit(t, ws, "add", "-A")
	runGit(t, ws, "commit", "-q", "-m", "one")
	base := gitOut(t, ws, "rev-parse", "HEAD")
	write(t, filepath.Join(ws, "b.txt"), "b\n")
	runGit(t, ws, "add", "-A")
	runGit(t, ws, "commit", "-q", "-m", "two")
	g, err := gitrepo.New(gitrepo.Options{Dir: ws, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBundleBytes: maxBundle})
	if err != nil {
		t.Fatal(err)
	}
	return newTestServer(t, Options{Token: testToken, Git: g}).URL, ws, base
}

func send(t *testing.T, method, u, contentType string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestGitBundleRoundTrip(t *testing.T) {
	u, ws, base := bundleServer(t, 0)
	resp, bundle := send(t, "GET", u+"/api/git/bundle?repo="+id(ws)+"&base="+base, "", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET bundle = %d %s", resp.StatusCode, bundle)
	}
	head := gitOut(t, ws, "rev-parse", "HEAD")
	if resp.Header.Get("Content-Type") != BundleContentType || resp.Header.Get("X-Git-Head") != head ||
		resp.Header.Get("X-Git-Branch") != "refs/heads/main" {
		t.Errorf("bundle headers %v", resp.Header)
	}
	// A clone at base takes the bundle into origin/main through POST.
	other := t.TempDir()
	runGit(t, other, "clone", "-q", ws, ".")
	runGit(t, other, "reset", "-q", "--hard", base)
	runGit(t, other, "update-ref", "refs/remotes/origin/main", base)
	g, err := gitrepo.New(gitrepo.Options{Dir: other, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	u2 := newTestServer(t, Options{Token: testToken, Git: g}).URL
	resp, body := send(t, "POST", u2+"/api/git/bundle?repo="+id(other), BundleContentType, strings.NewReader(string(bundle)))
	if resp.StatusCode != 200 {
		t.Fatalf("POST bundle = %d %s", resp.StatusCode, body)
	}
	var ar apitype.GitBundleApplyResponse
	if err := json.Unmarshal(body, &ar); err != nil {
		t.Fatal(err)
	}
	if len(ar.Updated) != 1 || ar.Updated[0].Ref != "refs/remotes/origin/main" || ar.Updated[0].New != head || ar.Updated[0].Old != base {
		t.Errorf("POST bundle updated %+v", ar.Updated)
	}
	if got := gitOut(t, other, "rev-parse", "origin/main"); got != head {
		t.Errorf("origin/main = %s, want %s", got, head)
	}
	if got := gitOut(t, other, "rev-parse", "main"); got != base {
		t.Errorf("local main moved to %s", got)
	}
}

func TestGitChangesetRoute(t *testing.T) {
	u, ws, base := bundleServer(t, 0)
	resp, body := send(t, "GET", u+"/api/git/changeset?repo="+id(ws)+"&base="+base, "", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("GET changeset = %d %s", resp.StatusCode, body)
	}
	var cs apitype.GitChangesetResponse
	if err := json.Unmarshal(body, &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs.Commits) != 1 || cs.Commits[0].Subject != "two" || len(cs.Files) != 1 || cs.Files[0].Path != "b.txt" || cs.Files[0].Status != "A" {
		t.Errorf("changeset = %+v", cs)
	}
}

func TestGitBundleErrors(t *testing.T) {
	u, ws, _ := bundleServer(t, 0)
	tests := []struct {
		name, method, path, contentType, body string
		want                                  int
		wantBody                              string
	}{
		{"bundle without repo", "GET", "/api/git/bundle", "", "", 400, `{"error":"repo query parameter is required"}`},
		{"bundle bad repo", "GET", "/api/git/bundle?repo=" + id("/etc"), "", "", 400, `{"error":"Invalid repo ID"}`},
		{"bundle option base", "GET", "/api/git/bundle?repo=" + id(ws) + "&base=--all", "", "", 400, `{"error":"Invalid revision"}`},
		{"bundle unknown base", "GET", "/api/git/bundle?repo=" + id(ws) + "&base=nope", "", "", 400, `{"error":"Invalid revision"}`},
		{"bundle nothing new", "GET", "/api/git/bundle?repo=" + id(ws) + "&base=HEAD", "", "", 409, `{"error":"No commits since base"}`},
		{"changeset without base", "GET", "/api/git/changeset?repo=" + id(ws), "", "", 400, `{"error":"base query parameter is required"}`},
		{"changeset bad base", "GET", "/api/git/changeset?repo=" + id(ws) + "&base=a..b", "", "", 400, `{"error":"Invalid revision"}`},
		{"apply garbage", "POST", "/api/git/bundle?repo=" + id(ws), BundleContentType, "garbage", 400, `{"error":"Invalid bundle"}`},
		{"apply json", "POST", "/api/git/bundle?repo=" + id(ws), "application/json", "{}", 400, `{"error":"Content-Type must be application/x-git-bundle"}`},
		{"apply bad repo", "POST", "/api/git/bundle?repo=" + id("/etc"), "", "x", 400, `{"error":"Invalid repo ID"}`},
	}
	for _, tt := range tests {
		resp, body := send(t, tt.method, u+tt.path, tt.contentType, strings.NewReader(tt.body))
		if resp.StatusCode != tt.want || strings.TrimSpace(string(body)) != tt.wantBody {
			t.Errorf("%s: %s %s = %d %s, want %d %s", tt.name, tt.method, tt.path, resp.StatusCode, body, tt.want, tt.wantBody)
		}
	}
}

func TestGitBundleTooLarge(t *testing.T) {
	u, ws, _ := bundleServer(t, 64)
	resp, body := send(t, "GET", u+"/api/git/bundle?repo="+id(ws), "", nil)
	if resp.StatusCode != 413 || strings.TrimSpace(string(body)) != `{"error":"Bundle too large","limit":64}` {
		t.Errorf("GET bundle over the cap = %d %s, want 413", resp.StatusCode, body)
	}
	// Past the API's JSON body limit yet under the bundle limit is not a 413.
	resp, body = send(t, "POST", u+"/api/git/bundle?repo="+id(ws), BundleContentType, strings.NewReader(strings.Repeat("x", 65)))
	if resp.StatusCode != 413 {
		t.Errorf("POST 65 bytes over a 64-byte cap = %d %s, want 413", resp.StatusCode, body)
	}
}

// TestGitApplyBundleOverJSONCap posts a bundle larger than the 1 MiB cap of
// JSON requests: the route is exempt, the git leaf's own limit applies.
func TestGitApplyBundleOverJSONCap(t *testing.T) {
	u, ws, base := bundleServer(t, 0)
	data := make([]byte, 3<<19) // 1.5 MiB that does not compress
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	runGit(t, other, "clone", "-q", ws, ".")
	runGit(t, other, "update-ref", "refs/remotes/origin/main", base)
	if err := os.WriteFile(filepath.Join(ws, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	runGit(t, ws, "add", "-A")
	runGit(t, ws, "commit", "-q", "-m", "big")
	resp, bundle := send(t, "GET", u+"/api/git/bundle?repo="+id(ws)+"&base="+base, "", nil)
	if resp.StatusCode != 200 || len(bundle) < 1<<20 {
		t.Fatalf("GET bundle = %d, %d bytes; want 200 and over 1 MiB", resp.StatusCode, len(bundle))
	}
	g, err := gitrepo.New(gitrepo.Options{Dir: other, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	u2 := newTestServer(t, Options{Token: testToken, Git: g}).URL
	resp, body := send(t, "POST", u2+"/api/git/bundle?repo="+id(other), BundleContentType, bytes.NewReader(bundle))
	if resp.StatusCode != 200 {
		t.Fatalf("POST %d-byte bundle = %d %s, want 200", len(bundle), resp.StatusCode, body)
	}
	// JSON routes keep the 1 MiB cap.
	resp, _ = send(t, "POST", u2+"/api/expose", "application/json", bytes.NewReader(bundle))
	if resp.StatusCode == 200 {
		t.Error("POST /api/expose took a 1.5 MiB body")
	}
}

// plainGit is a Git without bundle support.
type plainGit struct{ Git }

func TestGitBundleNotImplemented(t *testing.T) {
	var g plainGit
	u := newTestServer(t, Options{Token: testToken, Git: g}).URL
	for _, p := range []string{"/api/git/bundle?repo=x", "/api/git/changeset?repo=x&base=y"} {
		resp, body := send(t, "GET", u+p, "", nil)
		if resp.StatusCode != 501 {
			t.Errorf("GET %s without a bundler = %d %s, want 501", p, resp.StatusCode, body)
		}
	}
	resp, _ := send(t, "POST", u+"/api/git/bundle?repo=x", "", strings.NewReader("x"))
	if resp.StatusCode != 501 {
		t.Errorf("POST bundle without a bundler = %d, want 501", resp.StatusCode)
	}
}
