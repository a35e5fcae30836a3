package modaltest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// RootMarker is the file whose hash tells an image's root from the engine's default
// root: dpkg's package list, which the host's userland (with its many packages) and a
// Debian image never share.
const RootMarker = "/var/lib/dpkg/status"

// RootMarkerScript prints the sha256 of RootMarker as sha256sum does (hash first).
const RootMarkerScript = "sha256sum " + RootMarker

// ImageFileSum is the hex sha256 of path in the image ref of res: the file in the
// topmost layer that has it. It fails t when no layer has it.
func ImageFileSum(t testing.TB, res engine.ImageResolver, ref, path string) string {
	t.Helper()
	root, err := res.ResolveImage(t.Context(), ref)
	if err != nil {
		t.Fatalf("resolve image %s: %v", ref, err)
	}
	for _, layer := range slices.Backward(root.Layers) {
		data, err := os.ReadFile(filepath.Join(layer, path))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	t.Fatalf("image %s has no %s", ref, path)
	return ""
}

// CheckImageRoot fails t unless out, the output of RootMarkerScript in a sandbox, is
// the hash of RootMarker in image ref: the sandbox runs on the image's root, not on
// the engine's default root.
func CheckImageRoot(t testing.TB, res engine.ImageResolver, ref, out string) {
	t.Helper()
	want := ImageFileSum(t, res, ref, RootMarker)
	if got, _, _ := strings.Cut(strings.TrimSpace(out), " "); got != want {
		t.Errorf("%s inside the sandbox hashes to %q, want %s (image %s): the sandbox does not run on the image's root", RootMarker, got, want, ref)
	}
}
