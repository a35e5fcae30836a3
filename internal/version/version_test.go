package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	rev := "1323801abcdef0123456789abcdef0123456789a"
	settings := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	tests := []struct {
		name  string
		stamp string
		bi    *debug.BuildInfo
		want  string
	}{
		{"nothing known", "", nil, "devel"},
		{"devel build without vcs", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "devel"},
		{"devel build with vcs", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("false")}, "devel+1323801abcde"},
		{"dirty checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: settings("true")}, "devel+1323801abcde+dirty"},
		{"pseudo-version names the revision", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261123185511-1323801abcde+dirty"}, Settings: settings("true")}, "v0.0.0-20261123185511-1323801abcde+dirty"},
		{"go install of a tag", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"ldflags stamp wins", "v9.9.9", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: settings("false")}, "v9.9.9+1323801abcde"},
	}
	for _, tt := range tests {
		if got := fromBuildInfo(tt.stamp, tt.bi).String(); got != tt.want {
			t.Errorf("%s: fromBuildInfo(%q, …).String() = %q, want %q", tt.name, tt.stamp, got, tt.want)
		}
	}
}

// A `go build` in a fresh clone prints a version that names its commit. The
// test clones the current checkout (a linked worktree, whose .git is a file, is
// not recognised by the go command) and builds there; GOFLAGS may carry
// -buildvcs=false (CI sets it), the flag here wins.
func TestGoBuildFromCheckoutIsStamped(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git rev-parse HEAD: %v", err)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	if out, err := exec.Command("git", "clone", "-q", strings.TrimSpace(string(root)), clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	bin := filepath.Join(t.TempDir(), "sandbox-mcp")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/sandbox-mcp")
	build.Dir = clone
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("sandbox-mcp --version: %v", err)
	}
	if want := strings.TrimSpace(string(head))[:12]; !strings.Contains(string(out), want) {
		t.Errorf("sandbox-mcp --version = %q, want it to name commit %s", out, want)
	}
}
