package gitpush

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/internal/gittest"
)

func benchRemote(b *testing.B) (*gittest.Server, Remote, *Mirrors) {
	b.Helper()
	srv := gittest.New(b, testToken)
	files := map[string]string{}
	for i := range 300 {
		files[fmt.Sprintf("src/d%d/f%d.txt", i%10, i)] = strings.Repeat("some source line\n", 100)
	}
	url := srv.CreateRepo(b, "app", files)
	m, err := New(Options{CacheDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	return srv, Remote{URL: url, Token: testToken}, m
}

// BenchmarkCloneFromBundle measures the host's part of a tokenless boot (fetch
// into the warm mirror, bundle the branch) plus the clone from that bundle.
func BenchmarkCloneFromBundle(b *testing.B) {
	_, r, m := benchRemote(b)
	dir := b.TempDir()
	i := 0
	for b.Loop() {
		var buf bytes.Buffer
		res, err := m.Bundle(b.Context(), r, "", nil, &buf)
		if err != nil {
			b.Fatal(err)
		}
		f := filepath.Join(dir, "boot.bundle")
		if err := os.WriteFile(f, buf.Bytes(), 0o600); err != nil {
			b.Fatal(err)
		}
		i++
		gittest.Git(b, dir, "clone", "-q", "-b", res.Branch, f, fmt.Sprintf("c%d", i))
		b.SetBytes(res.Size)
	}
}

// BenchmarkPushRoundTrip measures one push of a one-commit bundle: fetch the
// mirror, check prerequisites, quarantine fetch, policy review, push.
func BenchmarkPushRoundTrip(b *testing.B) {
	_, r, m := benchRemote(b)
	var buf bytes.Buffer
	if _, err := m.Bundle(b.Context(), r, "", nil, &buf); err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	f := filepath.Join(work, "boot.bundle")
	if err := os.WriteFile(f, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	repo := filepath.Join(work, "repo")
	gittest.Git(b, work, "clone", "-q", "-b", "main", f, repo)
	i := 0
	for b.Loop() {
		b.StopTimer()
		base := strings.TrimSpace(gittest.Git(b, repo, "rev-parse", "HEAD"))
		i++
		if err := os.WriteFile(filepath.Join(repo, fmt.Sprintf("n%d.txt", i)), []byte("x\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		gittest.Git(b, repo, "add", "-A")
		gittest.Git(b, repo, "commit", "-qm", "n")
		bf := filepath.Join(work, "p.bundle")
		gittest.Git(b, repo, "bundle", "create", "-q", bf, "HEAD", "^"+base)
		data, _ := os.ReadFile(bf)
		b.StartTimer()
		if _, err := m.Push(b.Context(), r, "bench", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
