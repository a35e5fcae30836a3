package modal

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/modalserver"
)

// The tests that boot (the engine contract, the boot plan, tokenless git) run on
// image-booted sandboxes: the local server builds every registry image into the shared
// test image store (modalserver.StoreBuilder) and the engine boots it, so nothing runs
// on the engine's default root (the host's userland).

// imageServer serves a modalserver that builds images on eng (a StoreBuilder on its
// store, RUN steps in eng's build sandboxes) and points the SDK at it. It returns the
// server and the provider's settings.
func imageServer(t testing.TB, eng *modaltest.ImageEngine) (*modalserver.Server, map[string]string) {
	t.Helper()
	return serveOn(t, modalserver.Options{Engine: eng, Builder: modalserver.StoreBuilder{Store: eng.Store, Runner: eng.Runner()}})
}

// sandboxImageName names the built base image in the shared store: a snapshot removed
// at cleanup then leaves it (and its steps' cache) in place for the next run.
const sandboxImageName = "modal-test-sandbox"

var sandboxImageMu sync.Mutex

// sandboxImage builds the provider's base image (DefaultBaseImage without binary URLs:
// what the boot plan needs — git, Caddy, sshd, the user and the platform's folders —
// and not our binaries, which the engine binds in) into eng's store, names it and
// returns its id. Each step is cached under its content key: the first build on a
// machine installs the packages (apt, about a minute); later ones do no work.
func sandboxImage(t testing.TB, eng *modaltest.ImageEngine) string {
	t.Helper()
	sandboxImageMu.Lock()
	defer sandboxImageMu.Unlock()
	img := DefaultBaseImage(func(string) string { return "" })
	cmds, err := img.Commands()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var log bytes.Buffer
	start := time.Now()
	b := modalserver.StoreBuilder{Store: eng.Store, Runner: eng.Runner()}
	id, err := b.BuildImage(ctx, img.Def.From, cmds, &log)
	if err != nil {
		t.Fatalf("build the sandbox image: %v\n%s", err, log.String())
	}
	if err := eng.Store.Tag(ctx, id, sandboxImageName); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Logf("built the sandbox image %s in %v", id[:12], took.Round(time.Millisecond))
	}
	return id
}

// checkImageRoot fails t unless the sandbox whose exec is run is on image id's root.
func checkImageRoot(t testing.TB, eng *modaltest.ImageEngine, id string, run func(argv []string) (string, error)) {
	t.Helper()
	out, err := run([]string{"sh", "-c", modaltest.RootMarkerScript})
	if err != nil {
		t.Fatalf("%s: %v", modaltest.RootMarkerScript, err)
	}
	modaltest.CheckImageRoot(t, eng.Store, id, strings.TrimSpace(out))
}

// certsImageName names the Debian base with the machine's CA bundle in the shared store.
const certsImageName = "modal-test-certs"

// certsImage builds, once per machine and bundle (the copy step's key hashes the
// file), the Debian base with this machine's CA bundle, names it certsImageName and
// returns that name, which a sandbox's image names as its FROM: code in the sandbox
// then trusts what the host trusts (a TLS-inspecting proxy on the way out, as here).
func certsImage(t testing.TB, eng *modaltest.ImageEngine) string {
	t.Helper()
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img := image.Image{Name: certsImageName, From: imagetest.BaseRef, Steps: []image.Step{image.Copy(filepath.Base(bundle), bundle)}}
	if _, err := build.Build(ctx, img, build.Options{Store: eng.Store, Sources: image.Sources{Context: filepath.Dir(bundle)}}); err != nil {
		t.Fatalf("build %s: %v", certsImageName, err)
	}
	return certsImageName
}
