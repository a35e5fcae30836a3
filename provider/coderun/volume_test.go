package coderun

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/proliferate-ai/sandbox-mcp/provider/docsearch"
	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// workspaceFiles lists /workspace from the session's code, without ext4's lost+found.
const workspaceFiles = `(await Array.fromAsync(Deno.readDir("/workspace"))).map((e) => e.name).filter((n) => n !== "lost+found").sort()`

// Acceptance 2: /workspace outlives the sandbox; after the TTL the volume, its
// registry row and its code modules are gone. Checked through the engine: the file
// from a sandbox of its own, the volume with GetVolume.
func TestWorkspaceOutlivesTheSandbox(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	r, _ := newRunner(t, testConfig(t, "volume_ttl_minutes = 10\n"), Options{Now: clock, ReapEvery: -1})
	s := session(t, r, "workspace")
	ctx := t.Context()
	if res := run(t, s, `await Deno.writeTextFile("/workspace/lib.ts", "export const answer = 42;\n"); "ok"`); !res.Success {
		t.Fatalf("write: %+v", res)
	}
	first, _ := s.Sandbox(ctx)
	if err := s.SaveModules(ctx, []docsearch.Module{{Path: "/workspace/lib.ts", Description: "The answer to everything", Exports: []string{"answer"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := r.eng.Get(ctx, first); err == nil && info.State == engine.StateRunning {
		t.Errorf("sandbox %s still runs after Close", first)
	}
	res := run(t, s, `const m = await import("./lib.ts"); m.answer`)
	if !res.Success || string(res.Result) != "42" {
		t.Errorf("after a new sandbox, import ./lib.ts = %+v", res)
	}
	second, _ := s.Sandbox(ctx)
	if second == "" || second == first {
		t.Errorf("sandbox after close = %q, first was %q", second, first)
	}
	found, _ := s.SearchDocs(ctx, "answer to everything", "", 3)
	if len(found.Results) == 0 || found.Results[0].Source != "lib.ts" {
		t.Errorf("search while the volume lives = %+v", found.Results)
	}

	// Idle: the sandbox goes, the volume stays with its file.
	vol := s.Volume()
	now = now.Add(6 * time.Minute)
	rep, err := r.Cleanup(ctx, now, ConfigTTL)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Sandboxes, "workspace") || slices.Contains(rep.Volumes, vol) {
		t.Errorf("cleanup after 6 min = %+v, want the sandbox reaped and the volume %s kept", rep, vol)
	}
	if sb, _ := s.Sandbox(ctx); sb != "" {
		t.Errorf("sandbox %s runs after the idle cleanup", sb)
	}
	if got, err := volumeFile(t, r, vol, "lib.ts"); err != nil || got != "export const answer = 42;\n" {
		t.Errorf("lib.ts in the volume after the sandbox went = %q, %v", got, err)
	}
	// Past the TTL: everything goes.
	now = now.Add(11 * time.Minute)
	if rep, err = r.Cleanup(ctx, now, ConfigTTL); err != nil || !slices.Contains(rep.Volumes, vol) {
		t.Fatalf("cleanup after the TTL = %+v, %v", rep, err)
	}
	if st, err := r.volume(ctx, vol); err != nil || st.exists {
		t.Errorf("volume %s after cleanup: %+v, %v", vol, st, err)
	}
	if v := r.volumes(); v != nil {
		if _, err := v.GetVolume(ctx, vol); !errors.Is(err, engine.ErrNotFound) {
			t.Errorf("GetVolume(%s) after cleanup = %v, want not found", vol, err)
		}
	}
	vols, _ := r.store.Volumes(ctx)
	for _, v := range vols {
		if v.Name == vol {
			t.Errorf("registry row %+v survived cleanup", v)
		}
	}
	if ms, _ := r.store.Modules(ctx, vol); len(ms) != 0 {
		t.Errorf("modules after cleanup: %+v", ms)
	}
	found, _ = s.SearchDocs(ctx, "answer to everything", "", 3)
	for _, x := range found.Results {
		if x.Package == docsearch.ModulePackage {
			t.Errorf("search after cleanup returned the module %+v", x)
		}
	}
	// The next call starts over with an empty workspace.
	if res := run(t, s, workspaceFiles); !res.Success || string(res.Result) != "[]" {
		t.Errorf("workspace after cleanup = %+v (%s)", res, res.Result)
	}
}

// volume_capacity_mb is the engine volume's capacity: code that writes past it gets
// "no space left", and the session goes on.
func TestVolumeCapacity(t *testing.T) {
	r, _ := newRunner(t, testConfig(t, "volume_capacity_mb = 16\n"), Options{ReapEvery: -1})
	v := r.volumes()
	if v == nil {
		t.Skip("the engine has no volumes here (loop devices or e2fsprogs missing): a host directory has no capacity")
	}
	s := session(t, r, "capacity")
	if res := run(t, s, `Deno.writeFileSync("/workspace/ten", new Uint8Array(10 << 20)); Deno.statSync("/workspace/ten").size`); !res.Success || string(res.Result) != "10485760" {
		t.Fatalf("10 MB in a 16 MB volume = %+v", res)
	}
	info, err := v.GetVolume(t.Context(), s.Volume())
	if err != nil || info.CapacityBytes != 16<<20 || info.Labels["coderun-session"] != "capacity" || len(info.UsedBy) != 1 {
		t.Errorf("GetVolume = %+v, %v; want 16 MB, labelled with the session, used by its sandbox", info, err)
	}
	res := run(t, s, `Deno.writeFileSync("/workspace/twenty", new Uint8Array(20 << 20))`)
	if res.Success || !strings.Contains(strings.ToLower(res.Error), "no space left") {
		t.Errorf("20 MB more in a 16 MB volume = %+v, want no space left", res)
	}
	if res := run(t, s, `Deno.removeSync("/workspace/twenty"); `+workspaceFiles); !res.Success || string(res.Result) != `["ten"]` {
		t.Errorf("after the full volume = %+v (%s)", res, res.Result)
	}
}

// noVolumes is the real engine without its volumes, as on a machine without loop
// devices: sessions get host directories.
type noVolumes struct{ engine.Engine }

func (e noVolumes) Capabilities() engine.Capabilities {
	c := e.Engine.Capabilities()
	c.Volumes = false
	return c
}

// On an engine without volumes, the workspace is a host directory bound at
// /workspace; it outlives the sandbox and Cleanup deletes it after the TTL.
func TestHostDirectoryVolume(t *testing.T) {
	eng := needRuntime(t)
	now := time.Now()
	clock := func() time.Time { return now }
	r, _ := newRunner(t, testConfig(t, "volume_ttl_minutes = 10\n"), Options{Engine: noVolumes{eng}, Now: clock, ReapEvery: -1})
	if r.volumes() != nil {
		t.Fatal("the runner uses engine volumes on an engine without them")
	}
	s := session(t, r, "hostdir")
	ctx := t.Context()
	if res := run(t, s, `await Deno.writeTextFile("/workspace/f.txt", "kept"); "ok"`); !res.Success {
		t.Fatalf("write: %+v", res)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	dir := r.hostVolume(s.Volume())
	if b, err := os.ReadFile(dir + "/f.txt"); err != nil || string(b) != "kept" {
		t.Errorf("host directory file = %q, %v", b, err)
	}
	if res := run(t, s, `Deno.readTextFileSync("/workspace/f.txt")`); !res.Success || string(res.Result) != `"kept"` {
		t.Errorf("after a new sandbox = %+v", res)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(11 * time.Minute)
	if rep, err := r.Cleanup(ctx, now, ConfigTTL); err != nil || !slices.Contains(rep.Volumes, s.Volume()) {
		t.Fatalf("cleanup after the TTL = %+v, %v", rep, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("host directory after cleanup: %v", err)
	}
}

// New refuses an engine that claims volumes without implementing them.
func TestNewRefusesHiddenVolumes(t *testing.T) {
	eng := needRuntime(t)
	if !eng.Capabilities().Volumes {
		t.Skip("the engine has no volumes here")
	}
	_, err := New(context.Background(), Options{Config: testConfig(t, ""), Engine: struct{ engine.Engine }{eng}, DataDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "does not implement engine.Volumes") {
		t.Errorf("New with a wrapper hiding Volumes = %v", err)
	}
}
