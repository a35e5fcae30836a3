package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
)

// TestServeE2BImage: with --image, the template base boots that image of the data
// dir's store (here the shared test store's Debian base), as the local engine's record
// of the sandbox says; the slim base has no Caddy, which the host's userland (the
// default root) has. A missing image fails the serve at start, and --image on a
// protocol that cannot honour it is refused.
func TestServeE2BImage(t *testing.T) {
	t.Parallel()
	_, id := imagetest.Base(t)
	data := t.TempDir()
	// The data dir's store is the shared one, whose Debian base is built once.
	if err := os.Symlink(filepath.Join(imagetest.Dir(), "store"), filepath.Join(data, "images")); err != nil {
		t.Fatal(err)
	}
	exports := serveE2BEnv(t, data, "--image", imagetest.BaseRef)
	b, err := newE2BBackend(t.Context(), backendOptions{Getenv: func(k string) string { return exports[k] }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	in, err := b.Engine.Create(ctx, engineSpec())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Engine.Terminate(context.Background(), in.ID)
	var out strings.Builder
	code, err := b.Engine.Exec(ctx, in.ID, execRequest([]string{"sh", "-c", "command -v caddy || echo no caddy"}, &out))
	if err != nil || code != 0 || out.String() != "no caddy\n" {
		t.Errorf("command -v caddy in a sandbox of template base = %d, %q, %v; want no caddy (the slim image's root)", code, out.String(), err)
	}
	eng, err := local.NewEngine(local.EngineOptions{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if list, err := eng.List(ctx); err != nil || len(list) != 1 {
		t.Errorf("the local engine's sandboxes = %+v, %v; want the one created", list, err)
	} else if got, err := eng.Get(ctx, list[0].ID); err != nil || got.Image != id {
		t.Errorf("the engine sandbox booted image %q (%v), want %s", got.Image, err, id)
	}

	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--protocol", "e2b", "--image", "no-such-image"}, 1, `--image: image "no-such-image" is not in the local image store`},
		{[]string{"--protocol", "modal", "--image", imagetest.BaseRef}, 2, "--image is not supported by --protocol modal"},
	} {
		var stdout, stderr strings.Builder
		env := map[string]string{"HOME": t.TempDir(), "SANDBOXCTL_SANDBOX_MCP": "/bin/true"}
		args := append([]string{"--data-dir", data, "serve", "--addr", "127.0.0.1:0"}, tt.args...)
		code := run(t.Context(), args, func(k string) string { return env[k] }, strings.NewReader(""), &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.msg) {
			t.Errorf("sandboxctl %s = %d, %q; want %d and %q", strings.Join(args, " "), code, stderr.String(), tt.code, tt.msg)
		}
	}
}
