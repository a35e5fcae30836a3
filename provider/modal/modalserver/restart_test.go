package modalserver

import (
	"context"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// TestRestart: a new server on the same engine and state dir finds the running
// sandboxes (through their engine labels) and the snapshot images.
func TestRestart(t *testing.T) {
	eng := bootEngine(t)
	state := t.TempDir()
	serve := func() (*Server, string) {
		srv, err := New(Options{Engine: eng, StateDir: state, Token: testToken, Builder: StoreBuilder{Store: eng.Store, Runner: eng.Runner()}})
		if err != nil {
			t.Fatal(err)
		}
		return srv, modaltest.Serve(t, srv)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	srv1, url := serve()
	sdkEnv(t, url, true)
	c1 := newSDK(t)
	app, err := c1.Apps.FromName(ctx, "restart", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c1.Sandboxes.Create(ctx, app, c1.Images.FromRegistry("debian:bookworm-slim", nil), &modal.SandboxCreateParams{Name: "keep"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Filesystem.WriteText(ctx, "before restart", "/home/user/f.txt", nil); err != nil {
		t.Fatal(err)
	}
	snap, err := sb.SnapshotFilesystem(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	c1.Close()
	srv1.Close()

	_, url = serve()
	sdkEnv(t, url, true)
	c2 := newSDK(t)
	found, err := c2.Sandboxes.FromName(ctx, "restart", "keep", nil)
	if err != nil || found.SandboxID != sb.SandboxID {
		t.Fatalf("FromName after restart = %v, %v, want %s", found, err, sb.SandboxID)
	}
	if text, err := found.Filesystem.ReadText(ctx, "/home/user/f.txt", nil); err != nil || text != "before restart" {
		t.Errorf("ReadText after restart = %q, %v", text, err)
	}
	img, err := c2.Images.FromID(ctx, snap.ImageID, nil)
	if err != nil {
		t.Fatalf("snapshot image after restart: %v", err)
	}
	app2, err := c2.Apps.FromName(ctx, "restart", nil)
	if err != nil {
		t.Fatalf("app after restart: %v", err)
	}
	restored, err := c2.Sandboxes.Create(ctx, app2, img, nil)
	if err != nil {
		t.Fatalf("create from snapshot after restart: %v", err)
	}
	if text, err := restored.Filesystem.ReadText(ctx, "/home/user/f.txt", nil); err != nil || text != "before restart" {
		t.Errorf("restored ReadText = %q, %v", text, err)
	}
	found.Terminate(ctx, nil)
	restored.Terminate(ctx, nil)
}
