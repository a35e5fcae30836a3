// Package deploy holds the reference recipe of the sandbox image
// (deploy/Dockerfile), generated from provider/image.Default by `sandboxctl image
// dockerfile`. Its tests keep the file equal to that output, and the recipe in step
// with scripts/release: every file the image copies is one the release builds or one
// the repository holds.
package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// copySources returns the source paths of the Dockerfile's COPY lines with
// ${TARGETARCH} expanded to arch.
func copySources(t *testing.T, dockerfile []byte, arch string) []string {
	t.Helper()
	var srcs []string
	sc := bufio.NewScanner(strings.NewReader(string(dockerfile)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || !strings.EqualFold(f[0], "COPY") {
			continue
		}
		args := f[1:]
		for len(args) > 0 && strings.HasPrefix(args[0], "--") {
			if strings.HasPrefix(args[0], "--from") {
				args = nil // another stage's files
				break
			}
			args = args[1:]
		}
		if len(args) < 2 {
			continue
		}
		for _, s := range args[:len(args)-1] {
			srcs = append(srcs, strings.NewReplacer("${TARGETARCH}", arch, "$TARGETARCH", arch).Replace(s))
		}
	}
	return srcs
}

func TestDockerfileCopiesReleaseOutput(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	df, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "release"), "--list")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/release --list: %v", err)
	}
	release := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		release[l] = true
	}
	// Every command under cmd/ is built for both architectures.
	cmds, _ := filepath.Glob(filepath.Join(root, "cmd", "*"))
	if want := 2*len(cmds) + 1; len(release) != want {
		t.Errorf("scripts/release --list names %d files, want %d (2 × %d commands + SHA256SUMS):\n%s", len(release), want, len(cmds), out)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		srcs := copySources(t, df, arch)
		if len(srcs) == 0 {
			t.Fatalf("Dockerfile has no COPY lines")
		}
		binaries := 0
		for _, s := range srcs {
			switch {
			case release[s]:
				binaries++
			case strings.HasPrefix(s, "dist/"):
				t.Errorf("Dockerfile copies %s (TARGETARCH=%s), which scripts/release does not build", s, arch)
			default:
				if _, err := os.Stat(filepath.Join(root, s)); err != nil {
					t.Errorf("Dockerfile copies %s, which is not in the repository: %v", s, err)
				}
			}
		}
		// sandboxctl drives sandboxes from the host; the image has every other command.
		if want := len(cmds) - len(hostOnly); binaries != want {
			t.Errorf("Dockerfile copies %d release binaries for %s, want the %d commands that run in the sandbox", binaries, arch, want)
		}
		for _, s := range srcs {
			if hostOnly[filepath.Base(s)] && strings.HasPrefix(s, "dist/") {
				t.Errorf("Dockerfile copies %s, a host-side command, into the sandbox image", s)
			}
		}
	}
}

// hostOnly are the commands the platform runs outside the sandbox.
var hostOnly = map[string]bool{"sandboxctl": true}

func TestCopySources(t *testing.T) {
	df := []byte("FROM x\nCOPY --chown=user:user a b /dst/\ncopy dist/linux_${TARGETARCH}/p /usr/bin/p\nCOPY --from=build /x /y\nRUN COPY no\n")
	got := strings.Join(copySources(t, df, "arm64"), " ")
	if want := "a b dist/linux_arm64/p"; got != want {
		t.Errorf("copySources = %q, want %q", got, want)
	}
}
