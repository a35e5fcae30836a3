package imagetest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// PlanImageName tags PlanImage in the shared store: removing a snapshot made on it
// (Store.Remove takes untagged ancestors along) never removes it or its steps.
const PlanImageName = "imagetest-plan"

// PlanMarkerPath holds PlanMarker in PlanImage and nowhere else: a sandbox that reads
// it runs on the image's root, not on an engine's default root.
const (
	PlanMarkerPath = "/etc/sandbox-mcp-imagetest-plan"
	PlanMarker     = "booted from imagetest.PlanImage"
)

// PlanImage is the image Default builds: image.Default (the sandbox image: git,
// Caddy, bash, curl, sudo, sshd, jq, the user account and the platform's folders)
// on BaseRef without its Binary steps, plus the marker file. Our binaries change with
// every commit, which would rebuild the image every time; the engines bind them in
// instead (the local engine's EngineOptions.SandboxMCP and Proliferate), so a test on
// this image also checks that the boot plan works on an image that lacks them.
func PlanImage() image.Image {
	img := image.Default()
	img.Name, img.From = PlanImageName, BaseRef
	img.Steps = slices.DeleteFunc(slices.Clone(img.Steps), func(s image.Step) bool { return s.Kind == image.KindBinary })
	img.Steps = append(img.Steps, image.Run("echo '"+PlanMarker+"' > "+PlanMarkerPath))
	return img
}

// NewBuildEngine makes the engine whose sandboxes run the apt and run steps of a
// build: one whose ImageResolver is the given store (the local engine, with
// EngineOptions.Images set to it). Default calls it only when the cache lacks a step.
type NewBuildEngine func(t testing.TB, s *store.Store) build.BuildEngine

// Default returns the shared store and the id of PlanImage in it. The first build on
// a machine installs the packages from Debian's mirror in build sandboxes of
// newEngine (a few minutes, network needed); later calls find every step in the
// store's cache and create no sandbox. It skips and fails as Base does.
func Default(t testing.TB, newEngine NewBuildEngine) (*store.Store, string) {
	t.Helper()
	s, _ := Base(t)
	unlock := lock(t, filepath.Join(Dir(), "default.lock"))
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r := &lazyRunner{t: t, s: s, newEngine: newEngine}
	var log strings.Builder
	res, err := build.Build(ctx, PlanImage(), build.Options{Store: s, Runner: r, Progress: &log})
	if err != nil {
		t.Fatalf("build the boot plan's test image: %v\n%s", err, log.String())
	}
	if res.Built() > 0 {
		t.Logf("built the boot plan's test image %s:\n%s", res.ID[:12], log.String())
	}
	return s, res.ID
}

// lazyRunner is a build.EngineRunner on an engine made at the first step that needs
// one.
type lazyRunner struct {
	t         testing.TB
	s         *store.Store
	newEngine NewBuildEngine
	once      sync.Once
	r         build.Runner
	err       error
}

func (l *lazyRunner) Run(ctx context.Context, req build.RunRequest) (build.Layer, error) {
	l.once.Do(func() {
		if l.newEngine == nil {
			return
		}
		// The steps install packages from the Debian mirror, which apt retries for
		// minutes: a probe first makes the build fail within a minute naming it.
		if err := testutil.Reach(ctx, mirrorURL(), testutil.ReachTimeout); err != nil {
			l.err = fmt.Errorf("the image's apt steps need the Debian mirror: %w", err)
			return
		}
		if e := l.newEngine(l.t, l.s); e != nil {
			l.r = build.EngineRunner{Engine: e, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}
		}
	})
	if l.err != nil {
		return build.Layer{}, l.err
	}
	if l.r == nil {
		return build.Layer{}, errors.New("no build engine")
	}
	return l.r.Run(ctx, req)
}
