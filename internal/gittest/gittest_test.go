package gittest

import (
	"net/url"
	"os/exec"
	"strings"
	"testing"
)

func TestServerRequiresTokenForFetchAndPush(t *testing.T) {
	s := New(t, "s3cret")
	u := s.CreateRepo(t, "app", map[string]string{"README": "hi\n"})

	cmd := exec.Command("git", "clone", "-q", u, t.TempDir())
	cmd.Env = Env()
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("clone without token succeeded:\n%s", out)
	}
	bad, _ := url.Parse(u)
	bad.User = url.UserPassword("x-access-token", "wrong")
	cmd = exec.Command("git", "clone", "-q", bad.String(), t.TempDir())
	cmd.Env = Env()
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Fatalf("clone with a wrong token succeeded:\n%s", out)
	}
	denied, _, _ := s.Counts()
	if denied < 2 {
		t.Errorf("denied = %d, want at least 2", denied)
	}

	good, _ := url.Parse(u)
	good.User = url.UserPassword("x-access-token", "s3cret")
	work := t.TempDir()
	Git(t, work, "clone", "-q", good.String(), ".")
	if got := strings.TrimSpace(Git(t, work, "show", "HEAD:README")); got != "hi" {
		t.Errorf("README = %q", got)
	}
	Git(t, work, "commit", "-q", "--allow-empty", "-m", "more")
	Git(t, work, "push", "-q", "origin", "HEAD:refs/heads/feature")
	if got, want := s.Rev(t, "app", "refs/heads/feature"), strings.TrimSpace(Git(t, work, "rev-parse", "HEAD")); got != want {
		t.Errorf("remote feature = %q, want %q", got, want)
	}
	if _, _, pushes := s.Counts(); pushes == 0 {
		t.Error("no push counted")
	}
	c := s.Commit(t, "app", "main", "upstream", map[string]string{"b": "b"})
	if s.Rev(t, "app", "main") != c {
		t.Error("Commit did not advance main")
	}
}
