package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/imagetest"
)

// TestCreateFromImageSnapshot: `create --image` boots the platform's plan on an image
// of the data dir's store; `snapshot` of that sandbox prints an image id, and
// `create --snapshot ID` boots it with the file written before.
func TestCreateFromImageSnapshot(t *testing.T) {
	t.Parallel()
	requireNamespaces(t)
	imagetest.Base(t)
	bins := buildBinaries(t)
	data := t.TempDir()
	if err := os.Symlink(filepath.Join(imagetest.Dir(), "store"), filepath.Join(data, "images")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cleanupSandboxes(data) })
	getenv := func(k string) string {
		switch k {
		case "SANDBOXCTL_DATA_DIR":
			return data
		case "SANDBOXCTL_SANDBOX_MCP":
			return filepath.Join(bins, "sandbox-mcp")
		case "SANDBOXCTL_PROLIFERATE":
			return filepath.Join(bins, "proliferate")
		}
		return os.Getenv(k)
	}
	field := func(out, key string) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		s, _ := m[key].(string)
		return s
	}
	id := field(runImage(t, getenv, "create", "--image", imagetest.BaseRef, "--json"), "sandboxId")
	runImage(t, getenv, "exec", id, "--", "sh", "-c", "echo kept > /home/user/kept")
	snap := field(runImage(t, getenv, "snapshot", id, "--json"), "snapshotId")
	if strings.HasPrefix(snap, "snap-") || len(snap) != 64 {
		t.Fatalf("snapshot of an image sandbox = %q, want an image id", snap)
	}
	t.Cleanup(func() { imagetest.Store(t).Remove(context.Background(), snap) })
	if list := runImage(t, getenv, "image", "list"); !strings.Contains(list, snap[:12]) {
		t.Errorf("image list lacks the snapshot %s:\n%s", snap[:12], list)
	}
	runImage(t, getenv, "terminate", id)
	id2 := field(runImage(t, getenv, "create", "--snapshot", snap, "--json"), "sandboxId")
	if out := runImage(t, getenv, "exec", id2, "--", "cat", "/home/user/kept"); out != "kept\n" {
		t.Errorf("from the snapshot image: %q, want kept", out)
	}
	runImage(t, getenv, "terminate", id2)
}
