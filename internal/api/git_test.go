package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/apitype"
	"github.com/proliferate-ai/sandbox-mcp/internal/gitrepo"
)

// gitEnv isolates git from the machine's configuration for this test.
func gitEnv(t *testing.T) {
	t.Helper()
	for k, v := range map[string]string{
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_AUTHOR_NAME":     "Test",
		"GIT_AUTHOR_EMAIL":    "test@example.com",
		"GIT_COMMITTER_NAME":  "Test",
		"GIT_COMMITTER_EMAIL": "test@example.com",
	} {
		t.Setenv(k, v)
	}
}

func runGit(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gitServer builds a workspace with a committed repo at its root, a repo at
// depth 2 with no commits, and a symlink to a repo outside; it returns the
// test server and the paths.
func gitServer(t *testing.T) (url, ws, sub, outside string) {
	t.Helper()
	gitEnv(t)
	ws = t.TempDir()
	outside = t.TempDir()
	runGit(t, ws, "init", "-q", "-b", "main")
	write(t, filepath.Join(ws, "a.txt"), "a\n")
	runGit(t, ws, "add", "-A")
	runGit(t, ws, "commit", "-q", "-m", "one")
	sub = filepath.Join(ws, "apps", "web")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	runGit(t, sub, "init", "-q", "-b", "main")
	runGit(t, outside, "init", "-q", "-b", "main")
	if err := os.Symlink(outside, filepath.Join(ws, "linked")); err != nil {
		t.Fatal(err)
	}
	g, err := gitrepo.New(gitrepo.Options{Dir: ws, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, Options{Token: testToken, Git: g})
	return ts.URL, ws, sub, outside
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, body := do(t, "GET", u, "Bearer "+testToken, "")
	return resp.StatusCode, body
}

func id(p string) string { return url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(p))) }

func TestGitRepos(t *testing.T) {
	u, ws, sub, _ := gitServer(t)
	code, body := get(t, u+"/api/git/repos")
	if code != 200 {
		t.Fatalf("GET /api/git/repos = %d %s, want 200", code, body)
	}
	var got apitype.GitReposResponse
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := apitype.GitReposResponse{Repos: []apitype.GitRepo{
		{ID: base64.StdEncoding.EncodeToString([]byte(ws)), Path: ws},
		{ID: base64.StdEncoding.EncodeToString([]byte(sub)), Path: sub},
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("GET /api/git/repos mismatch (-want +got):\n%s", diff)
	}
}

func TestGitStatusAndDiff(t *testing.T) {
	u, ws, sub, _ := gitServer(t)
	write(t, filepath.Join(ws, "a.txt"), "changed\n")
	write(t, filepath.Join(ws, "new file.txt"), "n\n")

	code, body := get(t, u+"/api/git/status?repo="+id(ws))
	if code != 200 {
		t.Fatalf("status = %d %s, want 200", code, body)
	}
	var st apitype.GitStatusResponse
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	want := apitype.GitStatusResponse{Branch: "main", Files: []apitype.GitFile{
		{Status: ".M", Path: "a.txt"},
		{Status: "?", Path: "apps/"},
		{Status: "?", Path: "linked"},
		{Status: "?", Path: "new file.txt"},
	}}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status mismatch (-want +got):\n%s", diff)
	}
	if !strings.Contains(body, `"files":[`) || !strings.Contains(body, `"ahead":0`) {
		t.Errorf("status body = %s, want every field present", body)
	}

	code, body = get(t, u+"/api/git/diff?repo="+id(ws)+"&path=a.txt")
	var d apitype.GitDiffResponse
	if code != 200 || json.Unmarshal([]byte(body), &d) != nil || !strings.Contains(d.Diff, "+changed") {
		t.Errorf("diff a.txt = %d %s, want 200 with the change", code, body)
	}

	// No commits: the diff falls back to the index.
	write(t, filepath.Join(sub, "s.txt"), "s\n")
	runGit(t, sub, "add", "s.txt")
	write(t, filepath.Join(sub, "s.txt"), "s\nmore\n")
	code, body = get(t, u+"/api/git/diff?repo="+id(sub))
	if code != 200 || json.Unmarshal([]byte(body), &d) != nil || !strings.Contains(d.Diff, "+more") {
		t.Errorf("diff in a repo with no commits = %d %s, want 200 with the change", code, body)
	}
	code, body = get(t, u+"/api/git/status?repo="+id(sub))
	if code != 200 || !strings.Contains(body, `"AM"`) {
		t.Errorf("status in a repo with no commits = %d %s, want 200 with s.txt as AM", code, body)
	}
}

func TestGitDiffTruncated(t *testing.T) {
	u, ws, _, _ := gitServer(t)
	var b strings.Builder
	for b.Len() < 300<<10 {
		fmt.Fprintf(&b, "a long line number %d of a file that changes a lot\n", b.Len())
	}
	write(t, filepath.Join(ws, "a.txt"), b.String())
	code, body := get(t, u+"/api/git/diff?repo="+id(ws))
	if code != 200 {
		t.Fatalf("diff of 300 KB = %d, want 200", code)
	}
	var d apitype.GitDiffResponse
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(d.Diff, "\n...[truncated]") || len(d.Diff) != 65536+len("\n...[truncated]") {
		t.Errorf("diff of 300 KB has %d bytes, want 65536 plus the truncation marker", len(d.Diff))
	}
}

func TestGitErrors(t *testing.T) {
	u, ws, _, outside := gitServer(t)
	tests := []struct {
		name, path string
		wantCode   int
		wantBody   string
	}{
		{"status without repo", "/api/git/status", 400, `{"error":"repo query parameter is required"}`},
		{"status with empty repo", "/api/git/status?repo=", 400, `{"error":"repo query parameter is required"}`},
		{"diff without repo", "/api/git/diff?path=a.txt", 400, `{"error":"repo query parameter is required"}`},
		{"garbage id", "/api/git/status?repo=%25%25%25", 400, `{"error":"Invalid repo ID"}`},
		{"garbage diff id", "/api/git/diff?repo=bm90IGEgcGF0aA", 400, `{"error":"Invalid repo ID"}`},
		{"id outside workspace", "/api/git/status?repo=" + id(outside), 400, `{"error":"Invalid repo ID"}`},
		{"id of /etc", "/api/git/diff?repo=" + id("/etc"), 400, `{"error":"Invalid repo ID"}`},
		{"id through symlink out", "/api/git/status?repo=" + id(filepath.Join(ws, "linked")), 400, `{"error":"Invalid repo ID"}`},
		{"path escaping", "/api/git/diff?repo=" + id(ws) + "&path=../../etc/passwd", 400, `{"error":"Invalid file path"}`},
		{"absolute path", "/api/git/diff?repo=" + id(ws) + "&path=/etc/passwd", 400, `{"error":"Invalid file path"}`},
		{"path through symlink out", "/api/git/diff?repo=" + id(ws) + "&path=linked/x", 400, `{"error":"Invalid file path"}`},
		{"path over 4 KiB", "/api/git/diff?repo=" + id(ws) + "&path=" + strings.Repeat("a/", 2048) + "b", 400, `{"error":"Invalid file path: longer than 4096 bytes"}`},
	}
	for _, tt := range tests {
		code, body := get(t, u+tt.path)
		if code != tt.wantCode || strings.TrimSpace(body) != tt.wantBody {
			t.Errorf("%s: GET %s = %d %s, want %d %s", tt.name, tt.path, code, body, tt.wantCode, tt.wantBody)
		}
	}
}

func TestGitNotConfigured(t *testing.T) {
	ts := newTestServer(t, Options{Token: testToken})
	for _, p := range []string{"/api/git/repos", "/api/git/status?repo=x", "/api/git/diff?repo=x"} {
		if code, body := get(t, ts.URL+p); code != 501 {
			t.Errorf("GET %s without Git = %d %s, want 501", p, code, body)
		}
	}
}
