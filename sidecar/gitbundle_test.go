package sidecar

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/api"
	"github.com/proliferate-ai/sandbox-mcp/internal/gitrepo"
	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
)

// gitSidecar serves the real API over a workspace holding one repo with two
// commits and returns a client, the repo and its first commit.
func gitSidecar(t *testing.T) (*Client, string, string) {
	t.Helper()
	for _, kv := range gittest.Env() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "GIT_") {
			t.Setenv(k, v)
		}
	}
	ws := t.TempDir()
	gittest.Git(t, ws, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(ws, "a"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gittest.Git(t, ws, "add", "-A")
	gittest.Git(t, ws, "commit", "-qm", "one")
	base := strings.TrimSpace(gittest.Git(t, ws, "rev-parse", "HEAD"))
	gittest.Git(t, ws, "commit", "-q", "--allow-empty", "-m", "two")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := gitrepo.New(gitrepo.Options{Dir: ws, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.New(api.Options{Token: "tok", Logger: log, Git: g})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); srv.Close() })
	return newClient(t, nil, Options{BaseURL: srv.URL}), ws, base
}

func TestGitBundleClient(t *testing.T) {
	c, ws, base := gitSidecar(t)
	id := base64.StdEncoding.EncodeToString([]byte(ws))
	var buf bytes.Buffer
	info, err := c.GitBundle(t.Context(), id, base, &buf)
	if err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(gittest.Git(t, ws, "rev-parse", "HEAD"))
	if info.Branch != "refs/heads/main" || info.Head != head || info.Size != int64(buf.Len()) || !strings.HasPrefix(buf.String(), "# v") {
		t.Errorf("GitBundle info %+v, %d bytes", info, buf.Len())
	}
	cs, err := c.GitChangeset(t.Context(), id, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Commits) != 1 || cs.Commits[0].Subject != "two" {
		t.Errorf("GitChangeset commits %+v", cs.Commits)
	}
	// Apply the bundle back: origin/main appears at head.
	up, err := c.GitApplyBundle(t.Context(), id, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(up) != 1 || up[0].Ref != "refs/remotes/origin/main" || up[0].New != head {
		t.Errorf("GitApplyBundle = %+v", up)
	}
	// Errors are *APIError with the sidecar's status.
	var ae *APIError
	if _, err := c.GitBundle(t.Context(), id, "HEAD", io.Discard); !errors.As(err, &ae) || ae.Status != 409 {
		t.Errorf("GitBundle(base=HEAD) = %v, want 409 APIError", err)
	}
	if _, err := c.GitApplyBundle(t.Context(), id, strings.NewReader("junk")); !errors.As(err, &ae) || ae.Status != 400 || ae.Message != "Invalid bundle" {
		t.Errorf("GitApplyBundle(junk) = %v, want 400 Invalid bundle", err)
	}
}
