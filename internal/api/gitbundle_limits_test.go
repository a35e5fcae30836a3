package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/gitrepo"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// bundleUploadServer serves a one-commit workspace the way the sidecar does
// (HTTPServer) and returns the server, its address and the repo id.
func bundleUploadServer(t *testing.T) (*Server, string, string) {
	t.Helper()
	gitEnv(t)
	ws := t.TempDir()
	runGit(t, ws, "init", "-q", "-b", "main")
	write(t, filepath.Join(ws, "a.txt"), "a\n")
	runGit(t, ws, "add", "-A")
	runGit(t, ws, "commit", "-q", "-m", "one")
	g, err := gitrepo.New(gitrepo.Options{Dir: ws, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s, addr := serveHardened(t, Options{Token: testToken, Git: g})
	return s, addr, id(ws)
}

func bundlePost(repo string, length int64, body string) string {
	return "POST /api/git/bundle?repo=" + repo + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + testToken +
		"\r\nContent-Type: " + BundleContentType + "\r\nContent-Length: " + strconv.FormatInt(length, 10) + "\r\n\r\n" + body
}

// Issue 28: a bundle declared past the cap and never sent was held until the
// route's 10-minute read deadline; it is 413 from its headers.
func TestGitBundleDeclaredTooLargeIsRefusedAtOnce(t *testing.T) {
	_, addr, repo := bundleUploadServer(t)
	start := time.Now()
	c, br := rawRequest(t, addr, bundlePost(repo, rules.MaxGitBundleBytes+1, ""))
	resp, body := readAnswer(t, c, br)
	want := fmt.Sprintf(`{"error":"Bundle too large","limit":%d}`, rules.MaxGitBundleBytes)
	if resp.StatusCode != 413 || strings.TrimSpace(body) != want {
		t.Fatalf("POST bundle declaring %d bytes = %d %s, want 413 %s", rules.MaxGitBundleBytes+1, resp.StatusCode, body, want)
	}
	expectClosed(t, c, br)
	t.Logf("answered in %v", time.Since(start))
}

// Issue 28: bundle uploads read at once are capped; one past the cap is 503
// at once (nothing read), and a slot is free again when an upload ends.
func TestGitBundleUploadsAreCapped(t *testing.T) {
	s, addr, repo := bundleUploadServer(t)
	held := make([]func(), 0, rules.MaxBundleUploads)
	for range rules.MaxBundleUploads {
		// Announces 1000 bytes and sends 10: the upload stays in its slot.
		c, _ := rawRequest(t, addr, bundlePost(repo, 1000, "0123456789"))
		held = append(held, func() { c.Close() })
	}
	waitFor(t, func() bool { return len(s.bundleSlots) == rules.MaxBundleUploads }, "the held uploads to take every slot")

	c, br := rawRequest(t, addr, bundlePost(repo, 1000, ""))
	resp, body := readAnswer(t, c, br)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "too many bundle uploads") {
		t.Fatalf("upload past the cap = %d %q (Retry-After %q), want 503 naming the cap", resp.StatusCode, body, resp.Header.Get("Retry-After"))
	}
	expectClosed(t, c, br)

	held[0]()
	waitFor(t, func() bool { return len(s.bundleSlots) < rules.MaxBundleUploads }, "a slot to be given back")
	c, br = rawRequest(t, addr, bundlePost(repo, 3, "xyz"))
	resp, body = readAnswer(t, c, br)
	if resp.StatusCode != 400 {
		t.Errorf("upload of a non-bundle with a free slot = %d %s, want 400 from git", resp.StatusCode, body)
	}
	for _, h := range held[1:] {
		h()
	}
	waitFor(t, func() bool { return len(s.bundleSlots) == 0 }, "every slot to be given back")
}

// Issue 28 ("the caller's errors are 4xx, not 500"): a bundle upload whose
// body cannot be read (a malformed chunk) was answered 500.
func TestGitBundleBadBodyIs400(t *testing.T) {
	_, addr, repo := bundleUploadServer(t)
	c, br := rawRequest(t, addr, "POST /api/git/bundle?repo="+repo+" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+
		"\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
	resp, body := readAnswer(t, c, br)
	if resp.StatusCode != 400 || !strings.Contains(body, `"error":"read bundle: `) {
		t.Errorf("bundle with a malformed chunk = %d %s, want 400", resp.StatusCode, body)
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

func TestGitBundleErrorStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"body past the cap", fmt.Errorf("read bundle: %w", &bodyError{&http.MaxBytesError{Limit: 5}}), 413},
		{"body cut short", fmt.Errorf("read bundle: %w", &bodyError{io.ErrUnexpectedEOF}), 400},
		{"body too slow", fmt.Errorf("read bundle: %w", &bodyError{timeoutError{}}), 408},
		{"the leaf's own fault", fmt.Errorf("apply: %w", gitrepo.ErrBadBundle), asFault(gitrepo.ErrBadBundle).Status},
		{"the sidecar's failure", errors.New("bundle temp file: no space left on device"), 500},
	}
	for _, tc := range tests {
		if got := asFault(gitBundleError(tc.err)).Status; got != tc.want {
			t.Errorf("%s: gitBundleError(%v) answers %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}
