// Package imagetest gives tests of any package the Debian base image (Base), built
// once per machine (mmdebstrap, about 20 s), and the boot plan's test image (Default:
// the sandbox image without our binaries), both cached in a shared test data dir:
// $SANDBOX_TEST_IMAGES, else $TMPDIR/sandbox-mcp-test-images. A file lock makes
// concurrent test packages wait for one build instead of each running their own.
package imagetest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/lockedfile"

	"github.com/proliferate-ai/sandbox-mcp/internal/testutil"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/debian"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// BaseRef is the base every test image starts from.
const BaseRef = "debian:bookworm-slim"

// EnvDir names the shared test data dir.
const EnvDir = "SANDBOX_TEST_IMAGES"

// Dir is the shared test data dir.
func Dir() string {
	if d := os.Getenv(EnvDir); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "sandbox-mcp-test-images")
}

// Store opens the shared test image store (Dir()/store).
func Store(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(store.Options{Dir: filepath.Join(Dir(), "store")})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Base returns the shared store and the id of BaseRef in it, building the base the
// first time. Without mmdebstrap the test is skipped, unless $CI is set: there it
// fails, since CI must install mmdebstrap. Before a build it probes the Debian mirror,
// so without the network the test fails within a minute naming the mirror.
func Base(t testing.TB) (*store.Store, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the test image store unpacks layers with their owners and whiteouts: needs root")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI must install mmdebstrap: %v", err)
		}
		t.Skipf("mmdebstrap is not installed (apt-get install mmdebstrap): %v", err)
	}
	s := Store(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if in, err := s.Get(ctx, BaseRef); err == nil {
		return s, in.ID
	}
	unlock := lock(t, filepath.Join(Dir(), "base.lock"))
	defer unlock()
	// Another test package may have built it while this one waited for the lock.
	if in, err := s.Get(ctx, BaseRef); err == nil {
		return s, in.ID
	}
	// mmdebstrap retries an unreachable mirror for minutes; a probe first makes a test
	// without the network fail within a minute naming the mirror.
	RequireMirror(t, "building "+BaseRef+" with mmdebstrap")
	start := time.Now()
	id, err := debian.Build(ctx, s, BaseRef, debian.Options{})
	if errors.Is(err, debian.ErrNoMmdebstrap) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("build %s: %v", BaseRef, err)
	}
	t.Logf("built %s (%s) in %v", BaseRef, id[:12], time.Since(start).Round(time.Millisecond))
	return s, id
}

// RequireMirror fails the test, within a minute, when the Debian mirror that
// debian.Build and the base's apt sources use (the machine's, else
// debian.DefaultMirror) does not answer; need says what the test installs from it.
func RequireMirror(t testing.TB, need string) {
	t.Helper()
	testutil.RequireReachable(t, mirrorURL(), need)
}

// mirrorURL is the release file of BaseRef's suite on the machine's Debian mirror.
func mirrorURL() string {
	suite, _, _ := debian.ParseRef(BaseRef)
	return debian.MachineMirror("/etc/apt") + "/dists/" + suite + "/InRelease"
}

// lock takes the file lock name (held across test processes) until the returned
// func is called.
func lock(t testing.TB, name string) func() {
	t.Helper()
	unlock, err := lockedfile.MutexAt(name).Lock()
	if err != nil {
		t.Fatal(err)
	}
	return unlock
}
