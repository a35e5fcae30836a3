package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

func bootScratch(t *testing.T, p *testProvider) testBoot {
	t.Helper()
	b, err := p.Boot(t.Context(), provider.CreateOptions{SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), "s", b.SandboxID) })
	return b
}

func TestReadFiles(t *testing.T) {
	p := newProvider(t, nil)
	b := bootScratch(t, p)
	dir := filepath.Join(b.Home, "workspace", ".proliferate", ".verification")
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	writeFile(t, filepath.Join(dir, "a.txt"), "A")
	writeFile(t, filepath.Join(dir, "sub", "b.png"), "B")
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	tests := []struct {
		name   string
		folder string
		want   []provider.FileContent
	}{
		{"relative with slash", "workspace/.proliferate/.verification/", []provider.FileContent{{Path: "a.txt", Data: []byte("A")}, {Path: "sub/b.png", Data: []byte("B")}}},
		{"absolute", b.Paths.Workspace() + "/.proliferate/.verification/sub", []provider.FileContent{{Path: "b.png", Data: []byte("B")}}},
		{"missing", "nope", []provider.FileContent{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.ReadFiles(t.Context(), b.SandboxID, tt.folder)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ReadFiles(%q) mismatch (-want +got):\n%s", tt.folder, diff)
			}
		})
	}
}

func TestTestServiceCommands(t *testing.T) {
	p := newProvider(t, nil)
	b := bootScratch(t, p)
	os.MkdirAll(filepath.Join(b.Home, "workspace", "web", "src"), 0o755)
	cmds := []provider.ConfigurationServiceCommand{
		{Name: "dev server (web)", Command: "pwd; echo ok", WorkspacePath: "web", Cwd: "src"},
		{Name: "fails", Command: "echo bad >&2; exit 3"},
		{Name: "hangs", Command: "sleep 30"},
	}
	got, err := p.TestServiceCommands(t.Context(), b.SandboxID, cmds, provider.ServiceTestOptions{TimeoutMs: 500, RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	ws := b.Paths.Workspace()
	tests := []struct {
		out  string
		code int
		log  string
	}{
		{ws + "/web/src\nok\n", 0, "auto-start-test-r1-0-dev_server__web_.log"},
		{"bad\n", 3, "auto-start-test-r1-1-fails.log"},
		{"", 124, "auto-start-test-r1-2-hangs.log"},
	}
	for i, tt := range tests {
		r := got[i]
		if r.Output != tt.out || r.ExitCode == nil || *r.ExitCode != tt.code || filepath.Base(r.LogFile) != tt.log {
			t.Errorf("result %d = %+v (exit %v), want output %q exit %d log %s", i, r, *r.ExitCode, tt.out, tt.code, tt.log)
		}
	}
}
