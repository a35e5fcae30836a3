package modalserver

import (
	"context"
	"strings"
	"testing"
	"time"

	modal "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/local"
	"github.com/proliferate-ai/sandbox-mcp/provider/modal/internal/modaltest"
)

// noVolumes is the local engine saying it has no volumes. It still has the methods of
// engine.Volumes (embedded), so a refusal proves the server decides by
// Capabilities().Volumes, not by the methods alone.
type noVolumes struct{ *local.Engine }

func (n noVolumes) Capabilities() engine.Capabilities {
	c := n.Engine.Capabilities()
	c.Volumes = false
	return c
}

// volumesEngine is the isolated local engine booting images (bootEngine), skipped
// where it has no volumes (no loop devices or e2fsprogs).
func volumesEngine(t *testing.T) *modaltest.ImageEngine {
	t.Helper()
	eng := bootEngine(t)
	if !eng.Capabilities().Volumes {
		t.Skip("the local engine has no volumes here (it needs /dev/loop-control, mkfs.ext4 and tune2fs)")
	}
	return eng
}

// TestVolumesRefused: on an engine whose Capabilities().Volumes is false every volume
// call, and a create that mounts a volume, is the local server's clear refusal.
func TestVolumesRefused(t *testing.T) {
	eng := noVolumes{modaltest.Engine(t, local.EngineOptions{})}
	if _, ok := engine.Engine(eng).(engine.Volumes); !ok {
		t.Fatal("noVolumes lost the engine.Volumes methods; the test would not tell capability from type")
	}
	url, _ := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx := t.Context()
	const refusal = "local Modal server: Volumes are not available"
	for name, call := range map[string]func() error{
		"FromName": func() error {
			_, err := c.Volumes.FromName(ctx, "data", &modal.VolumeFromNameParams{CreateIfMissing: true})
			return err
		},
		"Ephemeral": func() error { _, err := c.Volumes.Ephemeral(ctx, nil); return err },
		"Delete":    func() error { return c.Volumes.Delete(ctx, "data", nil) },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Errorf("Volumes.%s = %v, want the local server's refusal", name, err)
		}
	}
	app, err := c.Apps.FromName(ctx, "vol", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	// A Volume value the server never made: the create itself must refuse the mount.
	vol := &modal.Volume{VolumeID: "vo-elsewhere"}
	_, err = c.Sandboxes.Create(ctx, app, c.Images.FromRegistry("debian:bookworm-slim", nil),
		&modal.SandboxCreateParams{Volumes: map[string]*modal.Volume{"/mnt/data": vol}})
	if err == nil || !strings.Contains(err.Error(), refusal) {
		t.Errorf("Create with a volume = %v, want the local server's refusal", err)
	}
	if vols, err := eng.ListVolumes(ctx); err != nil || len(vols) != 0 {
		t.Errorf("the engine has volumes %v (%v) after refusals", vols, err)
	}
}

// TestVolumes: on the local engine, which has volumes, Modal volumes are its volumes:
// made by name or ephemeral, mounted read-write in one sandbox and read-only in
// another running at the same time, kept after both end and read by a third, left out
// of a snapshot, refused deletion while mounted, listed, deleted.
func TestVolumes(t *testing.T) {
	eng := volumesEngine(t)
	url, srv := startServer(t, eng)
	sdkEnv(t, url, true)
	c := newSDK(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	app, err := c.Apps.FromName(ctx, "vol", &modal.AppFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Volumes.FromName(ctx, "data", nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("FromName of a missing volume = %v, want not found", err)
	}
	vol, err := c.Volumes.FromName(ctx, "data", &modal.VolumeFromNameParams{CreateIfMissing: true})
	if err != nil {
		t.Fatal(err)
	}
	img := c.Images.FromRegistry("debian:bookworm-slim", nil)
	sb1, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Volumes: map[string]*modal.Volume{"/mnt/data": vol}})
	if err != nil {
		t.Fatalf("Create with a volume: %v", err)
	}
	if _, errOut, code := execOut(t, ctx, sb1, []string{"sh", "-c", "echo shared > /mnt/data/f"}, nil); code != 0 {
		t.Fatalf("write to the volume = %d: %s", code, errOut)
	}
	// The files API reads the volume too. (Writing into it through the files API is
	// the local engine's WriteFile through the id-mapped mount, which it refuses with
	// EOVERFLOW today; docs/modal.md says so.)
	if text, err := sb1.Filesystem.ReadText(ctx, "/mnt/data/f", nil); text != "shared\n" || err != nil {
		t.Errorf("ReadText from the volume = %q, %v", text, err)
	}
	readOnly := true
	sb2, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Volumes: map[string]*modal.Volume{"/v": vol.WithMountOptions(&modal.VolumeMountOptionsParams{ReadOnly: &readOnly})}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := execOut(t, ctx, sb2, []string{"cat", "/v/f"}, nil); out != "shared\n" {
		t.Errorf("the second sandbox reads %q from the volume", out)
	}
	if _, _, code := execOut(t, ctx, sb2, []string{"sh", "-c", "echo x > /v/g"}, nil); code == 0 {
		t.Errorf("a read-only mount was written")
	}
	if err := c.Volumes.Delete(ctx, "data", nil); err == nil || !strings.Contains(err.Error(), "Volume 'data' is in use by") ||
		!strings.Contains(err.Error(), sb1.SandboxID) || !strings.Contains(err.Error(), sb2.SandboxID) {
		t.Errorf("Delete of a mounted volume = %v, want in use by %s and %s", err, sb1.SandboxID, sb2.SandboxID)
	}
	resp, err := srv.VolumeList(ctx, nil)
	if err != nil || len(resp.GetItems()) != 1 || resp.GetItems()[0].GetLabel() != "data" {
		t.Errorf("VolumeList = %v, %v; want the one named volume", resp, err)
	}

	// A snapshot holds the sandbox's own files, not the volume's.
	if _, _, code := execOut(t, ctx, sb1, []string{"sh", "-c", "echo mine > /home/user/own"}, nil); code != 0 {
		t.Fatal("write outside the volume failed")
	}
	snap, err := sb1.SnapshotFilesystem(ctx, nil)
	if err != nil {
		t.Fatalf("SnapshotFilesystem with a volume mounted: %v", err)
	}
	snapImg, err := c.Images.FromID(ctx, snap.ImageID, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb3, err := c.Sandboxes.Create(ctx, app, snapImg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if out, _, code := execOut(t, ctx, sb3, []string{"sh", "-c", "cat /home/user/own; ls -A /mnt/data 2>/dev/null || true"}, nil); out != "mine\n" || code != 0 {
		t.Errorf("a sandbox from the snapshot shows %q (exit %d); want its own file and nothing of the volume", out, code)
	}

	eph, err := c.Volumes.Ephemeral(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eph.CloseEphemeral()
	sb4, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Volumes: map[string]*modal.Volume{"/scratch": eph}})
	if err != nil {
		t.Fatalf("Create with an ephemeral volume: %v", err)
	}
	if out, _, _ := execOut(t, ctx, sb4, []string{"sh", "-c", "echo e > /scratch/x && cat /scratch/x"}, nil); out != "e\n" {
		t.Errorf("the ephemeral volume reads back %q", out)
	}
	if resp, err := srv.VolumeList(ctx, nil); err != nil || len(resp.GetItems()) != 1 {
		t.Errorf("VolumeList = %v, %v; the ephemeral volume has no name and is not listed", resp, err)
	}

	for _, sb := range []*modal.Sandbox{sb1, sb2, sb3, sb4} {
		if _, err := sb.Terminate(ctx, nil); err != nil {
			t.Errorf("Terminate %s: %v", sb.SandboxID, err)
		}
	}
	// The data outlives both sandboxes that used it.
	again, err := c.Volumes.FromName(ctx, "data", nil)
	if err != nil {
		t.Fatal(err)
	}
	sb5, err := c.Sandboxes.Create(ctx, app, img, &modal.SandboxCreateParams{Volumes: map[string]*modal.Volume{"/later": again}})
	if err != nil {
		t.Fatal(err)
	}
	if out, _, _ := execOut(t, ctx, sb5, []string{"cat", "/later/f"}, nil); out != "shared\n" {
		t.Errorf("after both sandboxes ended the volume holds %q", out)
	}
	if _, err := sb5.Terminate(ctx, nil); err != nil {
		t.Error(err)
	}
	if err := c.Volumes.Delete(ctx, "data", nil); err != nil {
		t.Errorf("Delete: %v", err)
	}
	if _, err := c.Volumes.FromName(ctx, "data", nil); err == nil {
		t.Errorf("the deleted volume is still found")
	}
}
