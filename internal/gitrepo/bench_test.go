package gitrepo

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkStatus5000Changed measures git status plus parsing on a repository
// with 5,000 modified files.
func BenchmarkStatus5000Changed(b *testing.B) {
	ws := b.TempDir()
	files := map[string]string{}
	for i := range 5000 {
		files[fmt.Sprintf("d%02d/file %04d.txt", i%50, i)] = "before\n"
	}
	initRepo(b, ws, files)
	for name := range files {
		writeFile(b, filepath.Join(ws, name), "after\n")
	}
	w := newWorkspace(b, ws)
	id := RepoID(ws)
	b.ResetTimer()
	for b.Loop() {
		st, err := w.Status(b.Context(), id)
		if err != nil {
			b.Fatal(err)
		}
		if len(st.Files) != 5000 {
			b.Fatalf("Status() has %d files, want 5000", len(st.Files))
		}
	}
}

// BenchmarkDiscoverNodeModules10k measures discovery of a workspace with a few
// repositories and 10,000 files in node_modules.
func BenchmarkDiscoverNodeModules10k(b *testing.B) {
	ws := b.TempDir()
	initRepo(b, ws, nil)
	initRepo(b, filepath.Join(ws, "apps", "web"), nil)
	initRepo(b, filepath.Join(ws, "packages", "lib"), nil)
	for i := range 10000 {
		dir := filepath.Join(ws, "node_modules", fmt.Sprintf("pkg%03d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.js", i)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 100 { // some ordinary source folders too
		writeFile(b, filepath.Join(ws, "apps", "web", "src", fmt.Sprintf("c%d", i), "x.ts"), "")
	}
	w := newWorkspace(b, ws)
	b.ResetTimer()
	for b.Loop() {
		repos, err := w.Repos(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if len(repos) != 3 {
			b.Fatalf("Repos() found %d repos, want 3", len(repos))
		}
	}
}
