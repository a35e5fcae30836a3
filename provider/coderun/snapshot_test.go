package coderun

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

func TestConfigHash(t *testing.T) {
	hash := func(deps string, denoVersion string) string {
		c, err := Parse([]byte("[sandbox]\nenabled = true\n"+deps), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		r := &Runner{cfg: c, o: Options{DenoVersion: denoVersion}}
		return r.ConfigHash()
	}
	a := "[[sandbox.dependencies]]\npackage = 'a'\nversion = '1.0.0'\n"
	b := "[[sandbox.dependencies]]\npackage = 'b'\nversion = '2.0.0'\ndocs = ['https://x.test/b.md']\n"
	base := hash(a+b, "2.9.6")
	tests := []struct {
		name string
		got  string
		same bool
	}{
		{"order does not matter", hash(b+a, "2.9.6"), true},
		{"docs do not matter", hash(a+strings.Replace(b, "b.md", "c.md", 1), "2.9.6"), true},
		{"a version matters", hash(strings.Replace(a, "1.0.0", "1.0.1", 1)+b, "2.9.6"), false},
		{"a package matters", hash(a, "2.9.6"), false},
		{"Deno's version matters", hash(a+b, "2.9.7"), false},
	}
	for _, tt := range tests {
		if (tt.got == base) != tt.same {
			t.Errorf("%s: hash %s vs %s, same = %v", tt.name, tt.got, base, tt.got == base)
		}
	}
	if len(base) != 16 {
		t.Errorf("hash %q is not 16 hex digits", base)
	}
}

// A restart finds the snapshot without building; a snapshot the engine lost is rebuilt
// on the next session. Both kinds: an image in the engine's store (deps-<configHash>)
// and a copy snapshot in the registry.
func TestSnapshotReuseAndRebuild(t *testing.T) {
	for _, kind := range []string{"image", "copy"} {
		t.Run(kind, func(t *testing.T) {
			c := testConfig(t, "")
			newR := newCopyRunner
			if kind == "image" {
				if needRuntime(t); fixtureImages == nil {
					t.Skip("no image store here (root and mmdebstrap)")
				}
				newR = newRunner
			}
			r, _ := newR(t, c, Options{ReapEvery: -1})
			first, err := r.EnsureSnapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if first.Image != (kind == "image") || first.Name != r.SnapshotName() {
				t.Fatalf("snapshot %+v; want kind %s named %s", first, kind, r.SnapshotName())
			}
			var progress strings.Builder
			r2, err := New(context.Background(), Options{Config: c, Engine: r.eng, Images: r.o.Images, DataDir: r.o.DataDir,
				ReapEvery: -1, Progress: &progress})
			if err != nil {
				t.Fatal(err)
			}
			defer r2.Close()
			again, err := r2.EnsureSnapshot(context.Background())
			if err != nil || !again.Reused || again.ID != first.ID || progress.Len() != 0 {
				t.Fatalf("restart: %+v %v, progress %q; want the same snapshot, reused, silently", again, err, progress.String())
			}
			loseSnapshot(t, r, first)
			s := session(t, r2, "rebuild-"+kind)
			if res := run(t, s, "1 + 1"); !res.Success || string(res.Result) != "2" {
				t.Errorf("run after a lost snapshot = %+v", res)
			}
			now, ok, err := r2.LookupSnapshot(context.Background())
			if err != nil || !ok || now.ID == first.ID || !strings.Contains(progress.String(), "building dependency snapshot") {
				t.Errorf("after the rebuild the snapshot is %+v (%v, %v); progress %q", now, ok, err, progress.String())
			}
		})
	}
}

// loseSnapshot makes the engine lose the dependency snapshot: the image leaves the
// store, or the registry points at a snapshot the engine never had.
func loseSnapshot(t *testing.T, r *Runner, snap SnapshotInfo) {
	t.Helper()
	if snap.Image {
		if _, err := fixtureImages.Remove(context.Background(), snap.ID); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, _ := json.Marshal(map[string]string{snap.Name: "snap-0000000000000000"})
	if err := os.WriteFile(filepath.Join(r.o.DataDir, "snapshots.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// On an engine that boots images, the dependency snapshot is an image on the
// configured base, named deps-<configHash> in the engine's store: Deno's native (glibc)
// binary runs on the Debian slim root, node_modules and the REPL's bundle are in it,
// and neither the host's CA file of the build, its REPL log nor the bundler is.
func TestSnapshotIsImage(t *testing.T) {
	needRuntime(t)
	if fixtureImages == nil {
		t.Skip("no image store here (root and mmdebstrap)")
	}
	r, progress := newRunner(t, testConfig(t, ""), Options{ReapEvery: -1})
	ctx := context.Background()
	snap, err := r.EnsureSnapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, err := fixtureImages.Get(ctx, snap.Name)
	if err != nil || in.ID != snap.ID || !snap.Image || snap.Base != imagetest.BaseRef {
		t.Fatalf("snapshot %+v; the store has %+v, %v", snap, in, err)
	}
	base, _ := fixtureImages.Get(ctx, imagetest.BaseRef)
	if in.Parent != base.ID || len(in.Layers) != len(base.Layers)+1 {
		t.Errorf("the image %+v is not one layer on the base %s", in, base.ID)
	}
	box, err := r.eng.Create(ctx, engine.Spec{Image: snap.Name, Labels: map[string]string{"coderun-test": "probe"}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.eng.Terminate(context.Background(), box.ID)
	var out strings.Builder
	script := rules.CoderunDeno + " --version; ls " + rules.CoderunDepsDir + "/node_modules " + rules.CoderunREPL + "; cat /etc/debian_version; " +
		"for f in " + rules.CoderunBuildCA + " " + rules.CoderunREPLLog + " " + rules.CoderunDenoDir + "/npm/*/@esbuild; do test -e $f && echo left: $f; done"
	if _, err := r.eng.Exec(ctx, box.ID, engine.ExecRequest{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &out}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"deno " + DefaultDenoVersion, "is-odd", "sucrase", rules.CoderunREPL, "12."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("in a sandbox of the image: %q lacks %q", out.String(), want)
		}
	}
	if strings.Contains(out.String(), "left:") {
		t.Errorf("the build's CA file, REPL log or esbuild is in the image: %q", out.String())
	}
	t.Logf("build:\n%s", progress)
}

// noImages hides the engine's images.
type noImages struct{ *local.Engine }

func (e noImages) Capabilities() engine.Capabilities {
	c := e.Engine.Capabilities()
	c.Images = false
	return c
}

// otherStore is an image store that cannot build Debian bases.
type otherStore struct{ ImageStore }

// The dependency snapshot is an image only with an image store, on an engine that
// boots images, and with a base: the configured one, or the default when the store
// has it or can build it. A configured base the store lacks is an error of the build,
// not a copy.
func TestChooseBase(t *testing.T) {
	eng := needRuntime(t)
	if fixtureImages == nil {
		t.Skip("no image store here (root and mmdebstrap)")
	}
	empty, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	noMmdebstrap := t.TempDir()
	tests := []struct {
		name   string
		image  string
		eng    engine.Engine
		images ImageStore
		path   string // PATH, when set
		want   string
	}{
		{"no store", "", eng, nil, "", ""},
		{"an engine without images", "", noImages{eng}, fixtureImages, "", ""},
		{"the default base in the store", "", eng, fixtureImages, "", imagetest.BaseRef},
		{"the default base buildable", "", eng, empty, "", imagetest.BaseRef},
		{"the default base not buildable: no mmdebstrap", "", eng, empty, noMmdebstrap, ""},
		{"the default base not buildable: another store", "", eng, otherStore{empty}, "", ""},
		{"a configured base", "registry.test/base:1", eng, empty, "", "registry.test/base:1"},
		{"a configured base, no images", "registry.test/base:1", noImages{eng}, fixtureImages, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path != "" {
				t.Setenv("PATH", tt.path)
			}
			c := testConfig(t, "")
			c.Image = tt.image
			r, err := New(t.Context(), Options{Config: c, Engine: tt.eng, Images: tt.images, DataDir: t.TempDir(), ReapEvery: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.base != tt.want || (r.imageStore() != nil) != (tt.want != "") {
				t.Errorf("base %q (store %v), want %q", r.base, r.imageStore() != nil, tt.want)
			}
			if tt.image == "" || tt.want == "" {
				return
			}
			_, err = r.EnsureSnapshot(t.Context())
			if err == nil || !strings.Contains(err.Error(), "base image registry.test/base:1") || !errors.Is(err, engine.ErrNotFound) {
				t.Errorf("EnsureSnapshot on a missing base = %v", err)
			}
		})
	}
}
