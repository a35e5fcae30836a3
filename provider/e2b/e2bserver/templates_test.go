package e2bserver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bserver"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/internal/e2btest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// TestTemplateImages: a template mapped to an image boots that image's root (its
// marker file, its sandbox user, no host /etc), one mapped to "" the engine's default
// root; a snapshot of an image sandbox is a template that keeps both the image and the
// sandbox's files, and so does a pause by snapshot and stop.
func TestTemplateImages(t *testing.T) {
	t.Parallel()
	srv, c := startWith(t, e2btest.Options{Image: true, NoPause: true, Templates: map[string]string{"host": ""}})
	ctx := t.Context()
	marker := e2btest.MarkerCommand
	img := create(t, c, e2bwire.NewSandbox{})
	ev := c.Envd(img)
	if got := run(t, ev, marker); got != e2btest.Marker+"\n" {
		t.Errorf("template base (image %s): %s = %q, want the image's marker", srv.Image[:12], marker, got)
	}
	if got := run(t, ev, "id -un 1000; command -v git caddy sandbox-mcp"); got != "user\n/usr/bin/git\n/usr/bin/caddy\n/usr/local/bin/sandbox-mcp\n" {
		t.Errorf("the image's user and programs = %q", got)
	}
	host := create(t, c, e2bwire.NewSandbox{TemplateID: "host"})
	if got := run(t, c.Envd(host), marker); got != "no marker\n" {
		t.Errorf("template host (the default root): %s = %q, want no marker", marker, got)
	}

	if err := ev.WriteFile(ctx, "/home/user/kept", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(ctx, img.SandboxID, "")
	if err != nil {
		t.Fatal(err)
	}
	child := create(t, c, e2bwire.NewSandbox{TemplateID: snap.SnapshotID})
	if got := run(t, c.Envd(child), marker+"; cat /home/user/kept"); got != e2btest.Marker+"\nmine" {
		t.Errorf("sandbox from the snapshot: %q, want the marker and the file", got)
	}
	if err := c.Pause(ctx, img.SandboxID); err != nil {
		t.Fatal(err)
	}
	again, err := c.Connect(ctx, img.SandboxID, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := run(t, c.Envd(again), marker+"; cat /home/user/kept"); got != e2btest.Marker+"\nmine" {
		t.Errorf("after a pause by snapshot and connect: %q, want the marker and the file", got)
	}
}

// TestTemplateImageNeedsImages: a template with an image on an engine that boots none
// is refused when the server starts, not at the first create.
func TestTemplateImageNeedsImages(t *testing.T) {
	eng, err := local.NewEngine(local.EngineOptions{DataDir: t.TempDir(), Unisolated: true})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	_, err = e2bserver.New(e2bserver.Options{Engine: eng, APIKey: e2btest.APIKey, Templates: map[string]string{"base": "debian:bookworm-slim"}})
	if err == nil || !strings.Contains(err.Error(), `template "base" boots image "debian:bookworm-slim"`) {
		t.Errorf("New with an image template on an engine without images = %v, want refused naming the template", err)
	}
	_, err = e2bserver.New(e2bserver.Options{Engine: eng, APIKey: e2btest.APIKey, Templates: map[string]string{"": ""}})
	if err == nil {
		t.Error("New with an empty template id = nil error")
	}
}
