package modalserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// imageEngine is the local engine booting images from the shared test store (its
// Debian base built once; the snapshots it commits removed at cleanup,
// modaltest.NewImageEngine) and a StoreBuilder running RUN steps on it. remove drops a
// built image (or a snapshot) from the store at cleanup, after the engine's sandboxes
// ended, the last given first.
func imageEngine(t testing.TB) (eng *modaltest.ImageEngine, b StoreBuilder, remove func(id string)) {
	s, _ := imagetest.Base(t)
	var built []string
	t.Cleanup(func() {
		for _, id := range slices.Backward(built) { // children (snapshots) first
			// Removing a snapshot removes the built image under it too (untagged).
			if _, err := s.Remove(context.Background(), id); err != nil && !errors.Is(err, engine.ErrNotFound) {
				t.Logf("remove image %s: %v", id, err)
			}
		}
	})
	eng = modaltest.NewImageEngine(t, local.EngineOptions{})
	b = StoreBuilder{Store: eng.Store, Runner: eng.Runner()}
	return eng, b, func(id string) { built = append(built, id) }
}

// serveBuilder serves a Server with b on eng and points the Go SDK at it.
func serveBuilder(t testing.TB, eng engine.Engine, b ImageBuilder) (*Server, *modal.Client, *modal.App) {
	return serveWith(t, Options{Engine: eng, Builder: b, StateDir: t.TempDir()})
}

// serveWith serves a Server with o (Token the tests') and points the Go SDK at it.
func serveWith(t testing.TB, o Options) (*Server, *modal.Client, *modal.App) {
	o.Token = testToken
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	sdkEnv(t, modaltest.Serve(t, srv), true)
	c := newSDK(t)
	app, err := c.Apps.FromName(t.Context(), "build", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, app
}

// builtID is the engine image the server built for the sandbox's image.
func builtID(t *testing.T, srv *Server, sb *modal.Sandbox) string {
	t.Helper()
	rec, err := srv.lookup(t.Context(), sb.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	img := srv.images[rec.imageID]
	if img == nil || img.built == "" {
		t.Fatalf("sandbox %s: image %s has no built image (%+v)", sb.SandboxID, rec.imageID, img)
	}
	return img.built
}

// buildLog is the output of the server's build of image id.
func buildLog(srv *Server, id string) string {
	srv.mu.Lock()
	b := srv.builds[id]
	srv.mu.Unlock()
	if b == nil {
		return ""
	}
	entries, _, _, _, _ := b.since(0)
	return strings.Join(entries, "")
}

// TestImageBuild: with a Builder on an engine that boots images, the Go SDK's
// fromRegistry("debian:bookworm-slim").dockerfileCommands(RUN …) is built (the base from
// the store, the RUN step in a build sandbox) and the sandbox boots from it and sees
// what the step made, ENV and WORKDIR applied. The same commands build once: a second
// sandbox starts no build, and a fresh server on the same store finds every step
// cached. A step that fails fails the SDK's build with its exit status; a base that is
// neither in the store nor a Debian base is refused with the reason.
func TestImageBuild(t *testing.T) {
	eng, b, remove := imageEngine(t)
	srv, c, app := serveBuilder(t, eng, b)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	uniq := strconv.FormatInt(time.Now().UnixNano(), 36) // a real build each run: the store is shared
	cmds := []string{"RUN echo built-" + uniq + " > /built && mkdir -p /srv/app", "ENV GREETING=hi", "WORKDIR /srv/app"}
	img := c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands(cmds, nil)
	start := time.Now()
	sb, err := c.Sandboxes.Create(ctx, app, img, nil)
	if err != nil {
		t.Fatalf("Create from an image with a RUN step: %v", err)
	}
	t.Logf("build (RUN on the cached base) and create: %v", time.Since(start).Round(time.Millisecond))
	id := builtID(t, srv, sb)
	remove(id)
	if out, errOut, code := execOut(t, ctx, sb, []string{"sh", "-c", "cat /built; echo $GREETING; pwd"}, nil); out != "built-"+uniq+"\nhi\n/srv/app\n" || code != 0 {
		t.Errorf("cat /built; echo $GREETING; pwd = %q (stderr %q), %d; want what the RUN step wrote, the ENV and the WORKDIR", out, errOut, code)
	}
	if log := buildLog(srv, img.ImageID); !strings.Contains(log, "RUN echo built-"+uniq) {
		t.Errorf("the build's output does not show the RUN step:\n%s", log)
	}
	// A snapshot of a sandbox booted from the built image keeps the image's files.
	if _, _, code := execOut(t, ctx, sb, []string{"sh", "-c", "echo later > /later"}, nil); code != 0 {
		t.Fatal("write /later")
	}
	snap, err := sb.SnapshotFilesystem(ctx, nil)
	if err != nil {
		t.Fatalf("SnapshotFilesystem: %v", err)
	}
	srv.mu.Lock()
	remove(srv.images[snap.ImageID].snapshot) // the store's image of the snapshot
	srv.mu.Unlock()
	fromSnap, err := c.Sandboxes.Create(ctx, app, snap, nil)
	if err != nil {
		t.Fatalf("Create from the snapshot: %v", err)
	}
	if out, errOut, code := execOut(t, ctx, fromSnap, []string{"cat", "/built", "/later"}, nil); out != "built-"+uniq+"\nlater\n" || code != 0 {
		t.Errorf("from the snapshot, cat /built /later = %q (stderr %q), %d", out, errOut, code)
	}
	fromSnap.Terminate(ctx, nil)
	sb.Terminate(ctx, nil)

	srv.mu.Lock()
	before := len(srv.builds) // the chain's: the bare base (the SDK's first layer) and the commands
	srv.mu.Unlock()
	again := c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands(cmds, nil)
	start = time.Now()
	sb2, err := c.Sandboxes.Create(ctx, app, again, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the same commands again (built) and create: %v", time.Since(start).Round(time.Millisecond))
	srv.mu.Lock()
	builds := len(srv.builds)
	srv.mu.Unlock()
	if again.ImageID != img.ImageID || builtID(t, srv, sb2) != id || builds != before {
		t.Errorf("same commands again: image %s (built %s), %d builds; want %s (built %s) and no new build (%d)", again.ImageID, builtID(t, srv, sb2), builds, img.ImageID, id, before)
	}
	sb2.Terminate(ctx, nil)

	srv2, c2, app2 := serveBuilder(t, eng, b)
	fresh := c2.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands(cmds, nil)
	sb3, err := c2.Sandboxes.Create(ctx, app2, fresh, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := builtID(t, srv2, sb3); got != id || !strings.Contains(buildLog(srv2, fresh.ImageID), "(0 of ") {
		t.Errorf("a fresh server built %s, want %s from the store's cache with no step built:\n%s", got, id, buildLog(srv2, fresh.ImageID))
	}
	sb3.Terminate(ctx, nil)

	_, err = c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands([]string{"RUN echo " + uniq + "; exit 3"}, nil), nil)
	if err == nil || !strings.Contains(err.Error(), "local Modal server: image build") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Create with a failing RUN step = %v, want the build's failure with its exit status", err)
	}
	_, err = c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("alpine:3.20", nil).DockerfileCommands([]string{"RUN true"}, nil), nil)
	if err == nil || !strings.Contains(err.Error(), `local Modal server: cannot build the image: cannot pull registry image "alpine:3.20"`) {
		t.Errorf("Create from alpine:3.20 = %v, want the refusal with its reason", err)
	}
}

// TestBuildLogWindow: a build's output is numbered from 1 and resumed after the last
// entry a join took; past maxBuildLog the oldest entries go and a join from 0 starts
// at the oldest kept; an ended build says so with its error.
func TestBuildLogWindow(t *testing.T) {
	b := newImageBuild()
	b.Write([]byte("a"))
	b.Write([]byte("b"))
	if got, newest, _, done, _ := b.since(0); strings.Join(got, "") != "ab" || newest != 2 || done {
		t.Errorf("since(0) = %q, %d, done %v; want \"ab\", 2, running", got, newest, done)
	}
	if got, newest, _, _, _ := b.since(1); strings.Join(got, "") != "b" || newest != 2 {
		t.Errorf("since(1) = %q, %d; want \"b\", 2", got, newest)
	}
	if got, newest, _, _, _ := b.since(2); len(got) != 0 || newest != 2 {
		t.Errorf("since(2) = %q, %d; want nothing, 2", got, newest)
	}
	big := strings.Repeat("x", maxBuildLog/2+1)
	b.Write([]byte(big))
	b.Write([]byte(big))
	if got, newest, _, _, _ := b.since(0); len(got) != 1 || got[0] != big || newest != 4 {
		t.Errorf("since(0) past the bound = %d entries, newest %d; want only the newest, 4", len(got), newest)
	}
	_, _, changed, _, _ := b.since(4)
	b.finish(errors.New("step 1: exit status 3"))
	select {
	case <-changed:
	default:
		t.Error("finish did not signal a change")
	}
	if _, _, _, done, err := b.since(4); !done || err == nil || b.running() {
		t.Errorf("after finish: done %v, err %v, running %v; want ended with the error, not running", done, err, b.running())
	}
}

// TestRunStepsNoBuilder: on an engine that boots images but a server without a
// Builder, a RUN step is refused naming what is missing; SkipRunSteps on a server with
// a Builder accepts it unrun instead of building.
func TestRunStepsNoBuilder(t *testing.T) {
	s, err := store.Open(store.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	eng := modaltest.Engine(t, local.EngineOptions{Images: s})
	for _, o := range []Options{{Engine: eng}, {Engine: eng, SkipRunSteps: true, Builder: StoreBuilder{Store: s}}} {
		_, c, app := serveWith(t, o)
		img := c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands([]string{"RUN touch /made-by-run"}, nil)
		sb, err := c.Sandboxes.Create(t.Context(), app, img, nil)
		if o.Builder == nil {
			if err == nil || !strings.Contains(err.Error(), "the server has no image builder (Options.Builder)") {
				t.Errorf("Create with a RUN step, no Builder = %v, want the refusal naming Options.Builder", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Create with a RUN step, SkipRunSteps: %v", err)
		}
		if _, _, code := execOut(t, t.Context(), sb, []string{"test", "-e", "/made-by-run"}, nil); code == 0 {
			t.Error("SkipRunSteps ran the RUN step")
		}
		sb.Terminate(t.Context(), nil)
	}
}

// BenchmarkImageBuild: the Go SDK's create from fromRegistry("debian:bookworm-slim")
// with a RUN step new to the store (built on the cached base in a build sandbox, then
// booted), and with commands built before (answered at once, booted).
func BenchmarkImageBuild(b *testing.B) {
	eng, sb, remove := imageEngine(b)
	srv, c, app := serveBuilder(b, eng, sb)
	create := func(cmd string) {
		s, err := c.Sandboxes.Create(b.Context(), app, c.Images.FromRegistry("debian:bookworm-slim", nil).DockerfileCommands([]string{cmd}, nil), nil)
		if err != nil {
			b.Fatal(err)
		}
		s.Terminate(b.Context(), nil)
	}
	uniq := strconv.FormatInt(time.Now().UnixNano(), 36)
	b.Run("new RUN step", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			create(fmt.Sprintf("RUN echo %s-%d > /built", uniq, i))
		}
	})
	b.Run("built before", func(b *testing.B) {
		create("RUN echo " + uniq + " > /built")
		for b.Loop() {
			create("RUN echo " + uniq + " > /built")
		}
	})
	srv.mu.Lock()
	for _, img := range srv.images {
		if img.built != "" {
			remove(img.built)
		}
	}
	srv.mu.Unlock()
}
