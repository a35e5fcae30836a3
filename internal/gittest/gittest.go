// Package gittest is a real git smart-HTTP server for tests: git http-backend
// under net/http/cgi on loopback, serving bare repositories from a temporary
// directory, and demanding a token (HTTP basic auth, any user name, the token
// as password, as GitHub's x-access-token) for every fetch and push.
package gittest

import (
	"crypto/subtle"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Server serves the bare repositories under Root at URL.
type Server struct {
	// URL is the server's base URL (http://127.0.0.1:port); a repository named
	// "x" is at URL + "/x.git".
	URL string
	// Root holds the bare repositories.
	Root  string
	Token string

	mu       sync.Mutex
	denied   int
	accepted int
	pushes   int
}

// New starts a server requiring token and stops it when the test ends. It
// skips the test when git http-backend is not installed.
func New(t testing.TB, token string) *Server {
	t.Helper()
	backend := Backend()
	if backend == "" {
		t.Skip("git http-backend not found")
	}
	s := &Server{Root: t.TempDir(), Token: token}
	h := &cgi.Handler{
		Path: backend,
		Root: "/",
		Env: []string{
			"GIT_PROJECT_ROOT=" + s.Root,
			"GIT_HTTP_EXPORT_ALL=1",
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=" + os.DevNull,
		},
		InheritEnv: []string{"PATH"},
	}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, pass, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(pass), []byte(s.Token)) != 1 {
			s.mu.Lock()
			s.denied++
			s.mu.Unlock()
			w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		s.mu.Lock()
		s.accepted++
		if strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			s.pushes++
		}
		s.mu.Unlock()
		// http-backend only lets an authenticated user push.
		r.Header.Del("Authorization")
		env := *h
		env.Env = append(append([]string{}, h.Env...), "REMOTE_USER=test")
		env.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// Backend returns the path of git-http-backend, or "" when git lacks it.
func Backend() string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return ""
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// Counts returns how many requests were denied and accepted, and how many of
// the accepted ones were pushes (receive-pack).
func (s *Server) Counts() (denied, accepted, pushes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.denied, s.accepted, s.pushes
}

// RepoURL is the URL of the repository name, without credentials.
func (s *Server) RepoURL(name string) string { return s.URL + "/" + name + ".git" }

// Dir is the bare repository of name on disk.
func (s *Server) Dir(name string) string { return filepath.Join(s.Root, name+".git") }

// CreateRepo makes the bare repository name with one commit on main holding
// files, and returns its URL.
func (s *Server) CreateRepo(t testing.TB, name string, files map[string]string) string {
	t.Helper()
	work := t.TempDir()
	Git(t, work, "init", "-q", "-b", "main")
	for p, content := range files {
		full := filepath.Join(work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, work, "add", "-A")
	Git(t, work, "commit", "-q", "--allow-empty", "-m", "initial")
	Git(t, s.Root, "clone", "-q", "--bare", work, s.Dir(name))
	Git(t, s.Dir(name), "config", "http.receivepack", "true")
	return s.RepoURL(name)
}

// Rev returns what rev resolves to in the bare repository name, "" when nothing.
func (s *Server) Rev(t testing.TB, name, rev string) string {
	t.Helper()
	cmd := exec.Command("git", "rev-parse", "--verify", "--quiet", rev)
	cmd.Dir = s.Dir(name)
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out))
}

// Commit adds a commit to branch of the bare repository name that writes
// files, as another user pushing would, and returns the new commit.
func (s *Server) Commit(t testing.TB, name, branch, msg string, files map[string]string) string {
	t.Helper()
	work := t.TempDir()
	Git(t, work, "clone", "-q", "--branch", branch, s.Dir(name), ".")
	for p, content := range files {
		full := filepath.Join(work, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, work, "add", "-A")
	Git(t, work, "commit", "-q", "-m", msg)
	Git(t, work, "push", "-q", "origin", "HEAD:refs/heads/"+branch)
	return strings.TrimSpace(Git(t, work, "rev-parse", "HEAD"))
}

// Git runs git in dir for test set-up, isolated from the machine's git
// configuration, and fails the test on error.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// Env is the environment for test git commands: the process's, with the
// machine's git configuration and prompts turned off and a fixed identity.
func Env() []string {
	return append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Test",
		"GIT_AUTHOR_EMAIL=test@example.com",
		"GIT_COMMITTER_NAME=Test",
		"GIT_COMMITTER_EMAIL=test@example.com",
	)
}
