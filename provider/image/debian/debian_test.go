package debian_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/debian"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		ref        string
		suite      string
		slim, isOK bool
	}{
		{"debian:bookworm", "bookworm", false, true},
		{"debian:bookworm-slim", "bookworm", true, true},
		{"debian:trixie-slim", "trixie", true, true},
		{"debian:latest", "", false, false},
		{"debian:12", "", false, false},
		{"ubuntu:noble", "", false, false},
		{"debian:bookworm;rm", "", false, false},
	} {
		suite, slim, ok := debian.ParseRef(tc.ref)
		if suite != tc.suite || slim != tc.slim || ok != tc.isOK {
			t.Errorf("ParseRef(%q) = %q, %v, %v; want %q, %v, %v", tc.ref, suite, slim, ok, tc.suite, tc.slim, tc.isOK)
		}
	}
}

func TestMachineMirror(t *testing.T) {
	for _, tc := range []struct{ name, list, extra, want string }{
		{"none", "", "", debian.DefaultMirror},
		{"one-line", "deb http://mirror.example/debian bookworm main\n", "", "http://mirror.example/debian"},
		{"options", "deb [arch=amd64 signed-by=/k.gpg] https://m.example/debian/ bookworm main\n", "", "https://m.example/debian"},
		{"deb822", "", "Types: deb\nURIs: http://deb.example/debian\nSuites: bookworm\n", "http://deb.example/debian"},
		{"not debian", "deb https://packages.cloud.google.com/apt cloud-sdk main\n", "", debian.DefaultMirror},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
			os.WriteFile(filepath.Join(dir, "sources.list"), []byte(tc.list), 0o644)
			os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), []byte(tc.extra), 0o644)
			if got := debian.MachineMirror(dir); got != tc.want {
				t.Errorf("MachineMirror = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestArgs(t *testing.T) {
	full := strings.Join(debian.Args("bookworm", false, "http://m/debian"), " ")
	slim := strings.Join(debian.Args("bookworm", true, "http://m/debian"), " ")
	if !strings.HasSuffix(full, "bookworm - http://m/debian") || strings.Contains(full, "path-exclude") {
		t.Errorf("Args(full) = %q", full)
	}
	if !strings.Contains(slim, "--dpkgopt=path-exclude=/usr/share/man/*") {
		t.Errorf("Args(slim) = %q", slim)
	}
}

// TestBase builds (or finds) the shared base and checks it is bookworm, slim.
func TestBase(t *testing.T) {
	s, id := imagetest.Base(t)
	fs, err := s.ResolveImage(context.Background(), imagetest.BaseRef)
	if err != nil || fs.ID != id || len(fs.Layers) != 1 {
		t.Fatalf("ResolveImage(base) = %+v, %v", fs, err)
	}
	root := fs.Layers[0]
	if b, err := os.ReadFile(filepath.Join(root, "etc/os-release")); err != nil || !strings.Contains(string(b), "bookworm") {
		t.Errorf("etc/os-release = %q, %v", b, err)
	}
	for _, p := range []string{"usr/bin/apt-get", "bin/sh", "etc/apt"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err != nil {
			t.Errorf("base lacks %s: %v", p, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "usr/share/man")); len(ents) > 0 {
		t.Errorf("slim base has manual pages: %d entries in usr/share/man", len(ents))
	}
}

func TestBuildRejectsOtherRefs(t *testing.T) {
	s, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := debian.Build(context.Background(), s, "alpine:3", debian.Options{}); err == nil {
		t.Error("Build(alpine:3) = nil error")
	}
}

// A build whose mmdebstrap fails after it wrote part of the root leaves nothing under
// the ref: the next caller builds again instead of booting a partial root.
func TestFailedBuildNamesNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the store unpacks layers with their owners: needs root")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "opt"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(dir, "mmdebstrap")
	script := "#!/bin/sh\ntar -cf - -C " + root + " .\necho 'E: killed halfway' >&2\nexit 1\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(store.Options{Dir: filepath.Join(dir, "store")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := debian.Build(ctx, s, "debian:bookworm-slim", debian.Options{Mmdebstrap: fake}); err == nil {
		t.Fatal("Build with a failing mmdebstrap = nil error")
	}
	if in, err := s.Get(ctx, "debian:bookworm-slim"); err == nil {
		t.Fatalf("after a failed build, debian:bookworm-slim names image %s; want no such image", in.ID)
	}
}

// BenchmarkBuildBase measures a whole base build with mmdebstrap into a fresh store
// (go test -bench BuildBase -benchtime 1x).
func BenchmarkBuildBase(b *testing.B) {
	imagetest.Base(b) // skips without mmdebstrap or root
	for b.Loop() {
		s, err := store.Open(store.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := debian.Build(context.Background(), s, imagetest.BaseRef, debian.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImportBaseLayer measures storing and unpacking the base's layer (the
// mmdebstrap tar, ~170 MB, ~9,000 files) into a fresh store: what an import or a base
// build costs besides mmdebstrap itself.
func BenchmarkImportBaseLayer(b *testing.B) {
	s, _ := imagetest.Base(b)
	in, err := s.Get(context.Background(), imagetest.BaseRef)
	if err != nil {
		b.Fatal(err)
	}
	blob := filepath.Join(s.Dir(), "oci", "blobs", "sha256", strings.TrimPrefix(in.Layers[0], "sha256:"))
	for b.Loop() {
		b.StopTimer()
		fresh, err := store.Open(store.Options{Dir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(blob)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := fresh.ImportRootFS(context.Background(), f, "base", debian.Config, "bench"); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
