package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Nothing of the host is visible in a sandbox on any root kind (the default root
// has the host's system directories, no more): files the host writes under /etc, /opt
// and /root before the create are not there, nor its shadow file, nor a listener on
// its loopback; the default root has no users of the host's either.
func TestRootHidesTheHost(t *testing.T) {
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) { testHidesTheHost(t, k) })
	}
}

func testHidesTheHost(t *testing.T, k rootKind) {
	e, base := k.engine(t)
	name := "sandbox-probe-" + newEngineID("")
	var planted []string
	for _, d := range []string{"/etc", "/opt", "/root"} {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte("host secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		planted = append(planted, p)
		t.Cleanup(func() { os.Remove(p) })
	}
	ln := hostListener(t)
	info := k.create(t, e, base, engine.Spec{})
	for _, p := range planted {
		if out, code := sh(t, e, info.ID, "bash", "-c", "cat "+p+" 2>&1"); code == 0 || strings.Contains(out, "secret") {
			t.Errorf("host file %s is visible inside: %q", p, out)
		}
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if out, code := sh(t, e, info.ID, "bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/127.0.0.1/%d && head -1 <&3", port)); code == 0 {
		t.Errorf("the host's loopback listener answered inside: %q", out)
	}
	if hostShadow, err := os.ReadFile("/etc/shadow"); err == nil {
		inside, _ := e.ReadFile(t.Context(), info.ID, "/etc/shadow")
		if string(inside) == string(hostShadow) {
			t.Error("the host's /etc/shadow is the sandbox's")
		}
	}
	if k.image {
		return // the image's layout and users are its own
	}
	out, _ := sh(t, e, info.ID, "ls", "/")
	if want := "bin dev etc home lib lib64 mnt opt proc root run sbin srv sys tmp usr var"; strings.Join(strings.Fields(out), " ") != strings.Join(strings.Fields(filterExisting(want)), " ") {
		t.Errorf("ls / = %q, want %q", strings.Join(strings.Fields(out), " "), filterExisting(want))
	}
	out, _ = sh(t, e, info.ID, "bash", "-c", "cut -d: -f1 /etc/passwd | tr '\\n' ' '; for d in /home /var /opt /root /srv /mnt; do ls -A $d; done | tr '\\n' ' '; stat -c %u:%g /usr/bin/env /etc/passwd")
	if want := "root user nobody user tmp 0:0\n0:0\n"; out != want {
		t.Errorf("users, homes and owners inside = %q, want %q", out, want)
	}
	// Programs still work: TLS roots, the loader, git.
	if out, code := sh(t, e, info.ID, "bash", "-c", "test -s /etc/ssl/certs/ca-certificates.crt && git --version >/dev/null && echo ok"); code != 0 || out != "ok\n" {
		t.Errorf("programs inside = %q (exit %d)", out, code)
	}
}

func filterExisting(names string) string {
	var out []string
	for _, n := range strings.Fields(names) {
		switch n {
		case "bin", "sbin", "lib", "lib64":
			if _, err := os.Lstat("/" + n); err != nil {
				continue
			}
		}
		out = append(out, n)
	}
	for _, n := range []string{"lib32", "libx32"} {
		if _, err := os.Lstat("/" + n); err == nil {
			out = append(out, n)
		}
	}
	return strings.Join(sortStrings(out), " ")
}

func sortStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

// dirImages is an ImageResolver over layer directories made by the test.
type dirImages map[string]engine.RootFS

func (d dirImages) ResolveImage(ctx context.Context, ref string) (engine.RootFS, error) {
	if fs, ok := d[ref]; ok {
		return fs, nil
	}
	return engine.RootFS{}, fmt.Errorf("image %q: %w", ref, engine.ErrNotFound)
}

// copyWithLibs copies the host programs progs and the libraries they load into dir.
func copyWithLibs(t testing.TB, dir string, progs ...string) {
	t.Helper()
	files := map[string]bool{}
	for _, p := range progs {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Skipf("%s is not installed", p)
		}
		files[path] = true
		out, _ := exec.Command("ldd", path).Output()
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				files[f] = true
			}
		}
	}
	for f := range files {
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(dst), 0o755)
		if out, err := exec.Command("cp", "-L", real, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v %s", f, err, out)
		}
	}
}

// A sandbox from an image: its layers (owned by the sandboxes' host ids) under its own
// upper layer, with the
// changes in UpperDir as the kernel's overlay writes them.
func TestImageRoot(t *testing.T) {
	base, top := t.TempDir(), t.TempDir()
	copyWithLibs(t, base, "bash", "cat", "ls", "stat", "rm", "touch", "id", "mkdir", "tr")
	os.MkdirAll(filepath.Join(base, "etc"), 0o755)
	os.WriteFile(filepath.Join(base, "etc/passwd"), []byte("root:x:0:0::/root:/bin/bash\n"), 0o644)
	os.WriteFile(filepath.Join(base, "etc/doomed"), []byte("x"), 0o644)
	for _, n := range []string{"hostname", "hosts", "resolv.conf"} {
		os.WriteFile(filepath.Join(base, "etc", n), nil, 0o644)
	}
	os.MkdirAll(filepath.Join(top, "etc"), 0o755)
	os.WriteFile(filepath.Join(top, "etc/marker"), []byte("from the top layer\n"), 0o644)
	for _, d := range []string{base, top} {
		os.Chmod(d, 0o755)
		// An image's layers come owned by the sandboxes' host ids, as the store
		// unpacks them: the engine binds them as they are.
		err := filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			return os.Lchown(p, rules.HostIDBase+int(st.Uid), rules.HostIDBase+int(st.Gid))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	imgs := dirImages{"test:1": {ID: "img-1", Layers: []string{base, top}, Env: []string{"PATH=/usr/bin:/bin", "IMG=1"}, WorkDir: "/etc"}}
	e, err := NewEngine(EngineOptions{DataDir: t.TempDir(), Images: imgs})
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if !e.Capabilities().Images {
		t.Fatal("an engine with an image resolver says it has no images")
	}
	if _, err := e.Create(t.Context(), engine.Spec{Image: "nope"}); !errors.Is(err, engine.ErrNotFound) {
		t.Errorf("create from a missing image = %v", err)
	}
	info := createBox(t, e, engine.Spec{Image: "test:1"})
	if info.Image != "img-1" || info.Runtime != "runc" {
		t.Errorf("info = image %q runtime %q", info.Image, info.Runtime)
	}
	out, code := sh(t, e, info.ID, "bash", "-c", `pwd; cat /etc/marker; echo $IMG; stat -c %u:%g /etc/passwd $(command -v bash)
		echo new > /etc/new && rm /etc/doomed && mkdir -p /opt/x && ls /etc | tr '\n' ' '`)
	if want := "/etc\nfrom the top layer\n1\n0:0\n0:0\nhostname hosts marker new passwd resolv.conf "; code != 0 || out != want {
		t.Errorf("inside the image = %q (exit %d), want %q", out, code, want)
	}
	upper, err := e.UpperDir(info.ID)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(upper, "etc/new"), &st); err != nil || st.Uid != rules.HostIDBase {
		t.Errorf("etc/new in the upper layer: %v, uid %d", err, st.Uid)
	}
	if err := syscall.Lstat(filepath.Join(upper, "etc/doomed"), &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR || st.Rdev != 0 {
		t.Errorf("etc/doomed in the upper layer is not a whiteout: %v, mode %o", err, st.Mode)
	}
	for _, n := range []string{"etc/hostname", "etc/hosts"} {
		if _, err := os.Lstat(filepath.Join(upper, n)); err == nil {
			t.Errorf("%s is in the upper layer", n)
		}
	}
	if b, err := os.ReadFile(filepath.Join(base, "etc/doomed")); err != nil || string(b) != "x" {
		t.Errorf("the layer changed: %q %v", b, err)
	}
	plain := createBox(t, e, engine.Spec{})
	if _, err := e.UpperDir(plain.ID); !errors.Is(err, engine.ErrUnsupported) {
		t.Errorf("UpperDir of a sandbox without an image = %v", err)
	}
}
