package e2btest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/e2b"
	"github.com/proliferate-ai/sandbox-mcp/provider/e2b/e2bwire"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/build"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// MarkerPath holds Marker in BootImage and nowhere else: a sandbox that reads it runs
// on the image's root, not on the engine's default root (the host's userland).
const (
	MarkerPath = "/etc/sandbox-mcp-e2btest-image"
	Marker     = "booted from the e2btest image"
)

// BootImageName tags BootImage in the shared test store, so that removing a snapshot
// made on it never removes it (or its cached steps) as an untagged ancestor.
const BootImageName = "e2btest-boot"

// BootImage is the image of the tests that boot from an image: the sandbox image
// (image.Default: git, Caddy, sshd, the sandbox user and the platform's folders) on
// the Debian base, without our binaries, which the engine binds in as it does for any
// image that lacks them, and with a marker file only this image has. Its steps are
// cached by content key in the shared store: the apt step runs once per machine.
func BootImage() image.Image {
	img := image.Default()
	img.Name, img.Header, img.Expose, img.Cmd = BootImageName, "", nil, nil
	img.From = imagetest.BaseRef
	img.Steps = slices.DeleteFunc(slices.Clone(img.Steps), func(s image.Step) bool { return s.Kind == image.KindBinary })
	img.Steps = append(img.Steps, image.Run("echo '"+Marker+"' > "+MarkerPath))
	return img
}

// buildBootImage builds BootImage into s (run steps in sandboxes of eng) under a file
// lock, so concurrent test packages wait for one build; it returns the image's id.
func buildBootImage(t testing.TB, s *store.Store, eng *local.Engine) (string, error) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(imagetest.Dir(), "e2btest-boot.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var progress strings.Builder
	start := time.Now()
	res, err := build.Build(ctx, BootImage(), build.Options{Store: s, Progress: &progress,
		Runner: build.EngineRunner{Engine: eng, IDs: store.ShiftedIDs(rules.HostIDBase, rules.IDCount)}})
	if err != nil {
		return "", fmt.Errorf("build the test image: %w\n%s", err, progress.String())
	}
	if res.Built() > 0 {
		t.Logf("built the test image %s (%d steps) in %v", res.ID[:12], res.Built(), time.Since(start).Round(time.Millisecond))
	}
	return res.ID, nil
}

// snapshotStore is the shared store as the engine's images, keeping the ids of the
// images it commits (the snapshots of image sandboxes) to remove them at the end:
// the shared store keeps only what every run reuses.
type snapshotStore struct {
	*store.Store
	mu  sync.Mutex
	ids []string
}

var _ engine.ImageCommitter = (*snapshotStore)(nil)

// CommitImage commits and records the new image.
func (s *snapshotStore) CommitImage(ctx context.Context, parent, dir string, idBase, idCount int) (string, error) {
	id, err := s.Store.CommitImage(ctx, parent, dir, idBase, idCount)
	if err == nil {
		s.mu.Lock()
		s.ids = append(s.ids, id)
		s.mu.Unlock()
	}
	return id, err
}

// removeCommitted removes the committed images, the last first (a snapshot of a
// sandbox booted from a snapshot is the child of that snapshot).
func (s *snapshotStore) removeCommitted(t testing.TB) {
	s.mu.Lock()
	ids := slices.Clone(s.ids)
	s.mu.Unlock()
	for _, id := range slices.Backward(ids) {
		if _, err := s.Remove(context.Background(), id); err != nil && !errors.Is(err, engine.ErrNotFound) {
			t.Logf("remove snapshot image %s: %v", id, err)
		}
	}
}

// MarkerCommand prints Marker on a root that has it and "no marker" on any other.
const MarkerCommand = "cat " + MarkerPath + " 2>/dev/null || echo no marker"

// CheckBootsImage fails the test unless a sandbox of the template base runs on
// BootImage's root (its marker file); the sandbox is killed afterwards.
func (s *Server) CheckBootsImage(t testing.TB) {
	t.Helper()
	c := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := c.Create(ctx, e2bwire.NewSandbox{TemplateID: "base", Timeout: 120, Secure: true})
	if err != nil {
		t.Fatalf("create a sandbox of template base: %v", err)
	}
	defer c.Kill(context.WithoutCancel(ctx), sb.SandboxID)
	r, err := c.Envd(sb).Run(ctx, MarkerCommand, e2b.RunOptions{})
	if err != nil || r.Stdout != Marker+"\n" {
		t.Errorf("%s in a sandbox of template base = %+v, %v; want %q (the test image's root, not the engine's default)", MarkerCommand, r, err, Marker)
	}
}
