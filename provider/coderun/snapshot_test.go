package coderun

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigHash(t *testing.T) {
	hash := func(deps string, denoVersion string) string {
		c, err := Parse([]byte("[sandbox]\nenabled = true\n"+deps), env(nil))
		if err != nil {
			t.Fatal(err)
		}
		r := &Runner{cfg: c, o: Options{DenoVersion: denoVersion}}
		return r.ConfigHash()
	}
	a := "[[sandbox.dependencies]]\npackage = 'a'\nversion = '1.0.0'\n"
	b := "[[sandbox.dependencies]]\npackage = 'b'\nversion = '2.0.0'\ndocs = ['https://x.test/b.md']\n"
	base := hash(a+b, "2.9.6")
	tests := []struct {
		name string
		got  string
		same bool
	}{
		{"order does not matter", hash(b+a, "2.9.6"), true},
		{"docs do not matter", hash(a+strings.Replace(b, "b.md", "c.md", 1), "2.9.6"), true},
		{"a version matters", hash(strings.Replace(a, "1.0.0", "1.0.1", 1)+b, "2.9.6"), false},
		{"a package matters", hash(a, "2.9.6"), false},
		{"Deno's version matters", hash(a+b, "2.9.7"), false},
	}
	for _, tt := range tests {
		if (tt.got == base) != tt.same {
			t.Errorf("%s: hash %s vs %s, same = %v", tt.name, tt.got, base, tt.got == base)
		}
	}
	if len(base) != 16 {
		t.Errorf("hash %q is not 16 hex digits", base)
	}
}

// A restart finds the snapshot in the registry without building; a registry entry the
// engine lost is rebuilt on the next session.
func TestSnapshotReuseAndRebuild(t *testing.T) {
	c := testConfig(t, "")
	r, _ := newRunner(t, c, Options{ReapEvery: -1})
	first, err := r.EnsureSnapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	r2, err := New(context.Background(), Options{Config: c, Engine: r.eng, DataDir: r.o.DataDir, ReapEvery: -1, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	again, err := r2.EnsureSnapshot(context.Background())
	if err != nil || !again.Reused || again.ID != first.ID || progress.Len() != 0 {
		t.Fatalf("restart: %+v %v, progress %q; want the same snapshot, reused, silently", again, err, progress.String())
	}
	// Point the registry at a snapshot the engine does not have.
	reg := map[string]string{first.Name: "snap-0000000000000000"}
	b, _ := json.Marshal(reg)
	if err := os.WriteFile(filepath.Join(r.o.DataDir, "snapshots.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	s := session(t, r2, "rebuild")
	if res := run(t, s, "1 + 1"); !res.Success || string(res.Result) != "2" {
		t.Errorf("run after a lost snapshot = %+v", res)
	}
	now, _, _ := r2.LookupSnapshot()
	if now.ID == "snap-0000000000000000" || !strings.Contains(progress.String(), "building dependency snapshot") {
		t.Errorf("after the rebuild the registry has %s; progress %q", now.ID, progress.String())
	}
}
