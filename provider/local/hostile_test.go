package local

// The sandbox boundary as an attacker tries it: root inside a sandbox of each root
// kind, through the engine's public API only. A static probe
// (testdata/hostile/probe) and a POSIX script (testdata/hostile/hostile.sh) run as
// root inside; the host side looks at what the sandbox left on the host.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/provider/image/store"
)

// hostileProbePath is where the probe is copied inside each sandbox.
const hostileProbePath = "/tmp/hostile-probe"

var hostileProbeOnce struct {
	sync.Once
	path string
	err  error
}

// hostileProbe builds the static probe once per test binary.
func hostileProbe(t *testing.T) []byte {
	t.Helper()
	hostileProbeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hostile-probe-")
		if err != nil {
			hostileProbeOnce.err = err
			return
		}
		p := filepath.Join(dir, "probe")
		cmd := exec.Command("go", "build", "-o", p, "./testdata/hostile/probe")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			hostileProbeOnce.err = fmt.Errorf("go build ./testdata/hostile/probe: %v\n%s", err, out)
			return
		}
		hostileProbeOnce.path = p
	})
	if hostileProbeOnce.err != nil {
		t.Fatal(hostileProbeOnce.err)
	}
	b, err := os.ReadFile(hostileProbeOnce.path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostileBox is one sandbox under attack and what the test knows of it.
type hostileBox struct {
	e       *Engine
	info    engine.Info
	dataDir string
	store   *store.Store // the image store of the image kind, else nil
}

// requireHostile skips, saying why, where the boundary cannot be tried at all.
func requireHostile(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the local engine's isolated sandboxes need root on the host; run the hostile tests as root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc is not installed (Debian package runc): the local engine's sandboxes run on it")
	}
}

// hostileEngine opens an engine of the kind on a data dir of its own that starts
// out 0755, as a data dir someone made by hand would.
func hostileEngine(t *testing.T, k rootKind) (*Engine, engine.Spec, string, *store.Store) {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	o := EngineOptions{DataDir: dataDir, SandboxMCP: sandboxMCP}
	var spec engine.Spec
	var s *store.Store
	if k.image {
		var id string
		s, id = planImage(t)
		o.Images, spec.Image = s, id
	}
	e, err := NewEngine(o)
	if errors.Is(err, engine.ErrNotIsolated) {
		t.Skipf("namespaces are not permitted here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, spec, dataDir, s
}

// newHostileBox creates a sandbox of the kind with spec's other fields, checks that
// it runs on the kind's root and that commands run as root inside, and copies the
// probe in through the file API.
func newHostileBox(t *testing.T, k rootKind, spec engine.Spec) hostileBox {
	t.Helper()
	e, base, dataDir, s := hostileEngine(t, k)
	return hostileBox{e: e, dataDir: dataDir, store: s}.create(t, k, base, spec)
}

// create is newHostileBox on an engine the test opened already (b.e).
func (b hostileBox) create(t *testing.T, k rootKind, base, spec engine.Spec) hostileBox {
	t.Helper()
	e := b.e
	info := k.create(t, e, base, spec)
	b.info = info
	if out, code := b.sh(t, "id -u"); code != 0 || out != "0\n" {
		t.Fatalf("id -u inside = %q (exit %d): the attacker is root inside, a command must run as root", out, code)
	}
	probe := hostileProbe(t)
	if err := e.WriteFile(t.Context(), info.ID, hostileProbePath, probe, 0o755); err != nil {
		t.Fatalf("copy the probe in through the file API: %v", err)
	}
	return b
}

// sh runs script with sh as root inside, stdout and stderr together.
func (b hostileBox) sh(t *testing.T, script string, env ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code, err := b.e.Exec(t.Context(), b.info.ID, engine.ExecRequest{Argv: []string{"sh", "-c", script}, Env: env,
		Stdout: &out, Stderr: &out, Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("exec %q: %v (output %q)", script, err, out.String())
	}
	return out.String(), code
}

// brokenLines fails t for every "BROKEN …" line of out and returns the names of
// the "ok …" and "BROKEN …" lines.
func brokenLines(t *testing.T, what, out string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		word, rest, _ := strings.Cut(line, " ")
		name, _, _ := strings.Cut(rest, " ")
		switch word {
		case "ok":
			names[name] = true
		case "BROKEN":
			names[name] = true
			t.Errorf("%s: %s", what, line)
		}
	}
	return names
}

func randomWord(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestHostile(t *testing.T) {
	requireHostile(t)
	for _, k := range rootKinds {
		t.Run(k.name, func(t *testing.T) {
			t.Run("descriptors", func(t *testing.T) { testHostileDescriptors(t, k) })
			t.Run("syscalls", func(t *testing.T) { testHostileSyscalls(t, k) })
			t.Run("masks", func(t *testing.T) { testHostileMasks(t, k) })
			t.Run("writes", func(t *testing.T) { testHostileWrites(t, k) })
			t.Run("memory", func(t *testing.T) { testHostileMemory(t, k) })
			t.Run("egress", func(t *testing.T) { testHostileEgress(t, k) })
			t.Run("root-not-root", func(t *testing.T) { testHostileRootNotRoot(t, k) })
			t.Run("script", func(t *testing.T) { testHostileScript(t, k) })
		})
	}
}

// Finding 1 and 3: a descriptor the test process holds (inherited by whatever it
// starts, as a shell's or a CI runner's would be) reaches no sandbox process, nor
// does any descriptor of the engine: tunnel listeners, ready pipes, namespaces.
func testHostileDescriptors(t *testing.T, k rootKind) {
	// The engine, the image and the probe first: the descriptors below must reach
	// only what the engine starts for the sandbox.
	e, base, dataDir, s := hostileEngine(t, k)
	hostileProbe(t)
	mark := "hostile-fd-" + randomWord(t)
	dir := filepath.Join(t.TempDir(), mark+"-dir")
	file := filepath.Join(dir, mark+"-file")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without O_CLOEXEC: every child of this process inherits them, as children of
	// a shell inherit `9</`.
	var leaked []int
	for _, p := range []string{dir, file} {
		fd, err := syscall.Open(p, syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		leaked = append(leaked, fd)
	}
	t.Cleanup(func() {
		for _, fd := range leaked {
			syscall.Close(fd)
		}
	})
	b := hostileBox{e: e, dataDir: dataDir, store: s}.create(t, k, base, engine.Spec{Ports: []int{7000}, Egress: true})
	for _, fd := range leaked {
		syscall.Close(fd)
	}
	leaked = nil

	// A command that stays while the host looks.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.e.Exec(ctx, b.info.ID, engine.ExecRequest{Argv: []string{"sleep", "120"}, Timeout: 3 * time.Minute})
	}()
	t.Cleanup(func() { cancel(); <-done })

	out, code := b.sh(t, "ls -l /proc/self/fd /proc/1/fd 2>&1; "+hostileProbePath+" fds "+mark)
	if code != 0 {
		t.Errorf("the descriptor scan inside exited %d:\n%s", code, out)
	}
	if strings.Contains(out, mark) {
		t.Errorf("a descriptor inside names the host's %s:\n%s", dir, out)
	}
	if names := brokenLines(t, "inside", out); !names["fds"] {
		t.Errorf("the probe's scan did not finish:\n%s", out)
	}
	ns, _ := b.sh(t, "readlink /proc/self/ns/pid")
	checkHostDescriptors(t, strings.TrimSpace(ns), []string{dir, file})
}

// checkHostDescriptors looks, as the host's root, at every descriptor of every
// process of the pid namespace pidNS (as readlink shows it: pid:[N]): none may be
// one of the files, a file outside the process's root, a socket of another network
// namespace, or (past 0, 1, 2) a pipe or socket shared with a process outside.
func checkHostDescriptors(t *testing.T, pidNS string, files []string) {
	t.Helper()
	if !strings.HasPrefix(pidNS, "pid:[") {
		t.Fatalf("the sandbox's pid namespace reads %q", pidNS)
	}
	type id struct{ dev, ino uint64 }
	marked := map[id]string{}
	for _, f := range files {
		var st unix.Stat_t
		if err := unix.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		marked[id{st.Dev, st.Ino}] = f
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	inside := map[string]bool{}
	outsideHolders := map[string]string{} // pipe:[…] or socket:[…] → a holder outside
	for _, p := range procs {
		pid := filepath.Base(p)
		if ns, _ := os.Readlink(p + "/ns/pid"); ns == pidNS {
			inside[pid] = true
			continue
		}
		ents, _ := os.ReadDir(p + "/fd")
		for _, ent := range ents {
			if target, err := os.Readlink(p + "/fd/" + ent.Name()); err == nil &&
				(strings.HasPrefix(target, "pipe:") || strings.HasPrefix(target, "socket:")) {
				outsideHolders[target] = pid + " (" + procComm(pid) + ")"
			}
		}
	}
	if len(inside) == 0 {
		t.Fatalf("no host process is in the sandbox's pid namespace %s", pidNS)
	}
	for pid := range inside {
		socks := netnsSockets(pid)
		ents, err := os.ReadDir("/proc/" + pid + "/fd")
		if err != nil {
			continue // exited
		}
		for _, ent := range ents {
			fdPath := "/proc/" + pid + "/fd/" + ent.Name()
			target, err := os.Readlink(fdPath)
			if err != nil {
				continue
			}
			fd, _ := strconv.Atoi(ent.Name())
			where := fmt.Sprintf("sandbox process %s (%s) fd %d -> %s", pid, procComm(pid), fd, target)
			var st unix.Stat_t
			if unix.Stat(fdPath, &st) == nil {
				if f, ok := marked[id{st.Dev, st.Ino}]; ok {
					t.Errorf("%s: the test process's inherited descriptor of %s", where, f)
					continue
				}
			}
			switch {
			case strings.HasPrefix(target, "/"):
				if strings.HasSuffix(target, " (deleted)") || strings.HasPrefix(target, "/memfd:") || harmlessDevice(st) {
					continue
				}
				var in unix.Stat_t
				if err := unix.Stat("/proc/"+pid+"/root"+target, &in); err != nil {
					t.Errorf("%s: no such file in the sandbox (%v): a file of the host", where, err)
				} else if in.Dev != st.Dev || in.Ino != st.Ino {
					t.Errorf("%s: not the file of that name inside: a file of the host", where)
				}
			case strings.HasPrefix(target, "socket:"):
				ino := strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")
				if !socks[ino] {
					t.Errorf("%s: a socket of another network namespace (the host's: a tunnel listener, a control socket?)", where)
				} else if h, ok := outsideHolders[target]; ok && fd > 2 {
					t.Errorf("%s: shared with host process %s", where, h)
				}
			case strings.HasPrefix(target, "pipe:"):
				if h, ok := outsideHolders[target]; ok && fd > 2 {
					t.Errorf("%s: a pipe shared with host process %s (a ready or sync pipe of the engine?)", where, h)
				}
			case strings.Contains(target, ":[") && !strings.HasPrefix(target, "anon_inode:"):
				kind, _, _ := strings.Cut(target, ":")
				if own, err := os.Readlink("/proc/" + pid + "/ns/" + kind); err == nil && own != target {
					t.Errorf("%s: a namespace that is not the process's own (%s)", where, own)
				}
			}
		}
	}
}

// harmlessDevice reports whether st is a character device that any process may
// hold from anywhere: null, zero, full, random, urandom, tty.
func harmlessDevice(st unix.Stat_t) bool {
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return false
	}
	maj, min := unix.Major(st.Rdev), unix.Minor(st.Rdev)
	return (maj == 1 && (min == 3 || min == 5 || min == 7 || min == 8 || min == 9)) || (maj == 5 && min == 0)
}

func procComm(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/comm")
	return strings.TrimSpace(string(b))
}

// netnsSockets lists the socket inodes of pid's network namespace.
func netnsSockets(pid string) map[string]bool {
	inodes := map[string]bool{}
	for table, col := range map[string]int{"tcp": 9, "tcp6": 9, "udp": 9, "udp6": 9, "raw": 9, "raw6": 9,
		"udplite": 9, "udplite6": 9, "icmp": 9, "icmp6": 9, "unix": 6, "netlink": 8, "packet": 8} {
		b, err := os.ReadFile("/proc/" + pid + "/net/" + table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > col {
				inodes[f[col]] = true
			}
		}
	}
	return inodes
}

// Findings 7 and 10: system calls outside Docker's default profile are refused.
func testHostileSyscalls(t *testing.T, k rootKind) {
	b := newHostileBox(t, k, engine.Spec{})
	out, code := b.sh(t, hostileProbePath+" syscalls")
	if code != 0 {
		t.Errorf("the probe exited %d:\n%s", code, out)
	}
	names := brokenLines(t, "syscall", out)
	for _, n := range hostileSyscalls {
		if !names[n] {
			t.Errorf("the probe printed no line for %s:\n%s", n, out)
		}
	}
}

// hostileSyscalls are the names the probe's syscalls mode reports.
var hostileSyscalls = []string{"socket(AF_VSOCK)", "personality(READ_IMPLIES_EXEC)", "kcmp", "pidfd_getfd",
	"process_madvise", "quotactl_fd", "mbind", "set_mempolicy", "keyctl", "userfaultfd", "io_uring_setup",
	"unshare(CLONE_NEWUSER)", "syslog", "listmount", "statmount"}

// hostMarker makes sure path on the host is something the sandbox could only have
// from the host: an existing file's device and inode, or, when path is missing, a
// marker the test writes there and removes at the end. It returns "dev:ino".
func hostMarker(t *testing.T, path string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if !errors.Is(err, unix.ENOENT) {
			t.Fatal(err)
		}
		content := []byte("# a marker of the local engine's hostile test; safe to remove\n")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			t.Fatalf("put a marker at the host's %s: %v", path, err)
		}
		f.Write(content)
		f.Close()
		t.Cleanup(func() {
			if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, content) {
				os.Remove(path)
			}
		})
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// Finding 10: Docker's masked paths, a cgroup namespace, none of the host's /etc.
func testHostileMasks(t *testing.T, k rootKind) {
	ids := map[string]string{}
	for _, p := range []string{"/etc/gitconfig", "/etc/environment", "/etc/profile.d"} {
		ids[p] = hostMarker(t, p)
	}
	profileMarker := "zz-hostile-" + randomWord(t) + ".sh"
	hostMarker(t, filepath.Join("/etc/profile.d", profileMarker))
	b := newHostileBox(t, k, engine.Spec{})

	for _, p := range []string{"/proc/interrupts", "/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/timer_stats",
		"/proc/latency_stats", "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
		"/sys/firmware", "/sys/devices/virtual/powercap"} {
		t.Run(strings.TrimPrefix(p, "/"), func(t *testing.T) {
			out, _ := b.sh(t, fmt.Sprintf(`p=%s; if [ ! -e $p ]; then echo absent; elif [ -d $p ]; then echo dir $(ls -A $p | wc -l); else echo file $(head -c 4096 $p 2>/dev/null | wc -c); fi`, p))
			switch strings.TrimSpace(out) {
			case "absent", "dir 0", "file 0":
			default:
				t.Errorf("%s inside: %q; want it masked (absent, an empty directory or reading empty)", p, out)
			}
		})
	}
	t.Run("cgroup", func(t *testing.T) {
		out, code := b.sh(t, "cat /proc/self/cgroup")
		if code != 0 || strings.TrimSpace(out) == "" {
			t.Fatalf("cat /proc/self/cgroup = %q (exit %d)", out, code)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.SplitN(line, ":", 3); len(f) != 3 || f[2] != "/" {
				t.Errorf("/proc/self/cgroup line %q names a host path; want a cgroup namespace (0::/ or N:ctrl:/)", line)
			}
		}
	})
	for p, hostID := range ids {
		t.Run("host"+strings.ReplaceAll(p, "/", "-"), func(t *testing.T) {
			out, _ := b.sh(t, "stat -c %d:%i "+p+" 2>/dev/null || echo absent")
			if strings.TrimSpace(out) == hostID {
				t.Errorf("%s inside is the host's (device:inode %s): bound in", p, hostID)
			}
			host, err := os.ReadFile(p)
			if err != nil || len(host) == 0 {
				return // a directory, or nothing to compare
			}
			if inside, err := b.e.ReadFile(t.Context(), b.info.ID, p); err == nil && bytes.Equal(inside, host) {
				t.Errorf("%s inside has the host's content (%d bytes): copied in", p, len(host))
			}
		})
	}
	t.Run("host-etc-profile.d-marker", func(t *testing.T) {
		if out, _ := b.sh(t, "ls /etc/profile.d/ 2>/dev/null"); strings.Contains(out, profileMarker) {
			t.Errorf("/etc/profile.d inside has %s, a file only the host's has: %q", profileMarker, out)
		}
	})
}

// mountEntry is one line of /proc/<pid>/mountinfo.
type mountEntry struct {
	Root       string // the mounted directory or file within its file system
	MountPoint string
	Major      uint32
	Minor      uint32
	Options    []string // per mount: rw, nosuid, nodev, …
	FSType     string
	Source     string
	Super      []string // per superblock: size=…, upperdir=…, …
}

func (m mountEntry) has(opt string) bool { return slices.Contains(m.Options, opt) }

// superValue returns the value of key=value among the superblock's options.
func (m mountEntry) superValue(key string) (string, bool) {
	for _, o := range m.Super {
		if k, v, ok := strings.Cut(o, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// parseMountinfo parses /proc/<pid>/mountinfo as the kernel writes it (see
// proc_pid_mountinfo(5)): octal escapes in paths, optional fields ended by "-".
func parseMountinfo(s string) ([]mountEntry, error) {
	var out []mountEntry
	for n, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			return nil, fmt.Errorf("mountinfo line %d %q: want 6 fields, optional ones, -, and 3 more", n+1, line)
		}
		maj, min, ok := strings.Cut(f[2], ":")
		ma, err1 := strconv.ParseUint(maj, 10, 32)
		mi, err2 := strconv.ParseUint(min, 10, 32)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("mountinfo line %d: device %q is not major:minor", n+1, f[2])
		}
		out = append(out, mountEntry{Root: unescapeMount(f[3]), MountPoint: unescapeMount(f[4]), Major: uint32(ma), Minor: uint32(mi),
			Options: strings.Split(f[5], ","), FSType: f[sep+1], Source: unescapeMount(f[sep+2]), Super: strings.Split(f[sep+3], ",")})
	}
	return out, nil
}

// unescapeMount undoes the kernel's \ooo escapes of space, tab, newline and backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// pseudoWritable are file systems with nothing of a disk behind them that a
// container has read-write (Docker's /proc, /dev/pts, /dev/mqueue).
var pseudoWritable = map[string]bool{"proc": true, "devpts": true, "mqueue": true}

// deviceBinds are the host's character devices (their paths in devtmpfs) that a
// runtime binds into a user namespace container, which cannot make device nodes,
// and over masked files (/dev/null).
var deviceBinds = map[string]bool{"/null": true, "/zero": true, "/full": true, "/random": true,
	"/urandom": true, "/tty": true}

// judgeWritable says why a writable mount is outside the sandbox's disk, or "".
// disk is the device of the sandbox's disk (host major:minor); hostDev gives a host
// path's device, for an overlay's upper directory.
func judgeWritable(m mountEntry, diskMajor, diskMinor uint32, hostDev func(string) (uint32, uint32, error)) string {
	if !m.has("rw") || slices.Contains(m.Super, "ro") {
		return ""
	}
	switch {
	case m.Major == diskMajor && m.Minor == diskMinor:
		return ""
	case pseudoWritable[m.FSType]:
		return ""
	case m.FSType == "devtmpfs" && deviceBinds[m.Root]:
		return ""
	case m.FSType == "tmpfs":
		var missing []string
		if _, ok := m.superValue("size"); !ok {
			missing = append(missing, "a size")
		}
		if !m.has("nosuid") {
			missing = append(missing, "nosuid")
		}
		// /dev holds device nodes: it cannot be nodev (Docker's is not either).
		if !m.has("nodev") && m.MountPoint != "/dev" {
			missing = append(missing, "nodev")
		}
		if len(missing) > 0 {
			return "a writable tmpfs without " + strings.Join(missing, ", ")
		}
		return ""
	case m.FSType == "overlay":
		upper, ok := m.superValue("upperdir")
		if !ok {
			return "a writable overlay without an upper directory"
		}
		ma, mi, err := hostDev(upper)
		if err != nil {
			return fmt.Sprintf("a writable overlay whose upper directory %s cannot be found on the host (%v)", upper, err)
		}
		if ma != diskMajor || mi != diskMinor {
			return fmt.Sprintf("a writable overlay whose upper directory %s is on device %d:%d, not the sandbox's disk", upper, ma, mi)
		}
		return ""
	}
	return fmt.Sprintf("a writable %s of device %d:%d (%s), not the sandbox's disk %d:%d", m.FSType, m.Major, m.Minor, m.Source, diskMajor, diskMinor)
}

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name, in string
		want     []mountEntry
		wantErr  bool
	}{
		{name: "ext4 with an optional field",
			in:   "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n",
			want: []mountEntry{{Root: "/mnt1", MountPoint: "/mnt2", Major: 98, Options: []string{"rw", "noatime"}, FSType: "ext3", Source: "/dev/root", Super: []string{"rw", "errors=continue"}}}},
		{name: "no optional field, escaped space",
			in:   "1 0 0:31 / /home/a\\040b rw,nosuid,nodev - tmpfs tmpfs rw,size=65536k\n",
			want: []mountEntry{{Root: "/", MountPoint: "/home/a b", Minor: 31, Options: []string{"rw", "nosuid", "nodev"}, FSType: "tmpfs", Source: "tmpfs", Super: []string{"rw", "size=65536k"}}}},
		{name: "empty", in: "\n"},
		{name: "no separator", in: "36 35 98:0 /mnt1 /mnt2 rw ext3 /dev/root rw\n", wantErr: true},
		{name: "bad device", in: "36 35 x /mnt1 /mnt2 rw - ext3 /dev/root rw\n", wantErr: true},
		{name: "cut short", in: "36 35 98:0 /mnt1 /mnt2 rw - ext3\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMountinfo(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseMountinfo(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if !tt.wantErr && fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("parseMountinfo(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestJudgeWritable(t *testing.T) {
	noHost := func(string) (uint32, uint32, error) { return 0, 0, fs.ErrNotExist }
	onDisk := func(string) (uint32, uint32, error) { return 7, 3, nil }
	tests := []struct {
		name   string
		line   string
		host   func(string) (uint32, uint32, error)
		broken bool
	}{
		{"the disk", "1 0 7:3 / /home/user rw,nodev - ext4 /dev/loop3 rw", noHost, false},
		{"read-only host", "1 0 8:1 /usr /usr ro - ext4 /dev/sda1 rw", noHost, false},
		{"writable host disk", "1 0 8:1 /x /etc/resolv.conf rw - ext4 /dev/sda1 rw", noHost, true},
		{"capped tmpfs", "1 0 0:40 / /dev/shm rw,nosuid,nodev - tmpfs shm rw,size=65536k", noHost, false},
		{"unbounded tmpfs", "1 0 0:40 / /usr/local/bin rw - tmpfs tmpfs rw", noHost, true},
		{"tmpfs without nodev", "1 0 0:40 / /run rw,nosuid - tmpfs tmpfs rw,size=1m", noHost, true},
		{"/dev", "1 0 0:41 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755", noHost, false},
		{"proc", "1 0 0:42 / /proc rw,nosuid,nodev,noexec - proc proc rw", noHost, false},
		{"device bind", "1 0 0:5 /null /dev/null rw,nosuid - devtmpfs udev rw", noHost, false},
		{"/dev/null over a masked file", "1 0 0:5 /null /proc/kcore rw,nosuid - devtmpfs udev rw", noHost, false},
		{"all of devtmpfs", "1 0 0:5 / /mnt rw,nosuid - devtmpfs udev rw", noHost, true},
		{"overlay on the disk", "1 0 0:50 / / rw - overlay overlay rw,lowerdir=/a,upperdir=/d/upper,workdir=/d/work", onDisk, false},
		{"overlay elsewhere", "1 0 0:50 / / rw - overlay overlay rw,lowerdir=/a,upperdir=/tmp/u,workdir=/tmp/w", noHost, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := parseMountinfo(tt.line)
			if err != nil || len(ms) != 1 {
				t.Fatalf("parseMountinfo(%q) = %v, %v", tt.line, ms, err)
			}
			if got := judgeWritable(ms[0], 7, 3, tt.host); (got != "") != tt.broken {
				t.Errorf("judgeWritable(%q) = %q, want broken %v", tt.line, got, tt.broken)
			}
		})
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n")
	f.Add("1 0 0:31 / /home/a\\040b rw - tmpfs tmpfs rw,size=1k\n")
	f.Add("\\")
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := parseMountinfo(s)
		if err != nil {
			return
		}
		for _, m := range ms {
			if m.FSType == "" || len(m.Options) == 0 {
				t.Errorf("parseMountinfo(%q) gave %+v", s, m)
			}
		}
	})
}

// Finding 9: /usr/local/bin is read-only for root inside, and nothing writable is
// outside the sandbox's disk: every writable mount is the disk, a size-capped
// tmpfs with nosuid and nodev, or a file system without storage (proc, devpts).
func testHostileWrites(t *testing.T, k rootKind) {
	b := newHostileBox(t, k, engine.Spec{})
	b0 := b
	t.Run("usr-local-bin", func(t *testing.T) {
		if k.image {
			// An image's root is an overlay whose upper layer is on the sandbox's
			// disk: /usr/local/bin is as writable as /usr, within the disk's cap,
			// which "mounts" below checks. Finding 9 is the default root's, whose
			// /usr is the host's.
			t.Skip("an image's /usr/local/bin is its own, on the sandbox's disk (see mounts)")
		}
		if out, code := b.sh(t, "touch /usr/local/bin/hostile && echo created"); code == 0 {
			t.Errorf("root inside wrote to /usr/local/bin: %q", out)
		}
	})
	t.Run("mounts", func(t *testing.T) {
		if b.info.Home == "" {
			t.Fatal("Info.Home is empty: the host path of the sandbox's home finds its disk")
		}
		var st unix.Stat_t
		if err := unix.Stat(b.info.Home, &st); err != nil {
			t.Fatalf("stat the sandbox's home on the host: %v", err)
		}
		diskMajor, diskMinor := unix.Major(st.Dev), unix.Minor(st.Dev)
		out, code := b.sh(t, "cat /proc/self/mountinfo")
		if code != 0 {
			t.Fatalf("cat /proc/self/mountinfo: %q", out)
		}
		ms, err := parseMountinfo(out)
		if err != nil {
			t.Fatal(err)
		}
		hostDev := func(p string) (uint32, uint32, error) {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				return 0, 0, err
			}
			return unix.Major(st.Dev), unix.Minor(st.Dev), nil
		}
		// The sandbox's disk is a loop device whose backing file is in the sandbox's
		// own directory (on an image root, Info.Home is on the overlay above it).
		ownDisk := func(m mountEntry) bool {
			b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", m.Major, m.Minor))
			return err == nil && m.FSType == "ext4" && strings.Contains(string(b), "/"+b0.info.ID+"/")
		}
		for _, m := range ms {
			if ownDisk(m) {
				continue
			}
			if why := judgeWritable(m, diskMajor, diskMinor, hostDev); why != "" {
				t.Errorf("%s is %s", m.MountPoint, why)
			}
		}
	})
}

// Finding 8: a memory hog dies under its limit; the sandbox lives on and answers.
func testHostileMemory(t *testing.T, k rootKind) {
	b := newHostileBox(t, k, engine.Spec{Limits: engine.Limits{MemoryBytes: 256 << 20}})
	out, code := b.sh(t, hostileProbePath+" hog 400")
	if code == 0 || strings.Contains(out, "allocated") {
		t.Errorf("a 400 MB hog under a 256 MiB limit = %q (exit %d); want it killed", out, code)
	}
	if out, code := b.sh(t, "echo alive"); code != 0 || out != "alive\n" {
		t.Errorf("exec after the hog = %q (exit %d); want the sandbox alive", out, code)
	}
	if info, err := b.e.Get(t.Context(), b.info.ID); err != nil || info.State != engine.StateRunning {
		t.Errorf("the sandbox after the hog: %+v, %v; want running", info, err)
	}
	// Init is never the victim: its score adjustment is below every command's.
	out, _ = b.sh(t, "cat /proc/1/oom_score_adj /proc/self/oom_score_adj")
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("oom_score_adj of init and of a command: %q", out)
	}
	initAdj, _ := strconv.Atoi(f[0])
	cmdAdj, _ := strconv.Atoi(f[1])
	if initAdj >= cmdAdj {
		t.Errorf("oom_score_adj: init %d, a command %d; want init's lower, so the OOM killer picks a command", initAdj, cmdAdj)
	}
}

// dnsTrap listens for DNS queries on addr:53 of the host's loopback and returns a
// function that lists what it received.
func dnsTrap(t *testing.T, addr string) func() []string {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(addr, "53"))
	if err != nil {
		t.Fatalf("listen for DNS on the host's %s:53: %v", addr, err)
	}
	var mu sync.Mutex
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 1500)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, fmt.Sprintf("%q", buf[:n]))
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// hostFileName returns a name the host's /etc/hosts gives an address, other than
// localhost: the host resolves it without asking a name server, while a resolver
// reading the sandbox's files would ask one.
func hostFileName(t *testing.T) string {
	b, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Skipf("the host has no /etc/hosts (%v): the name test needs a name the host resolves without the network", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		for _, name := range f[min(1, len(f)):] {
			if !strings.HasPrefix(name, "localhost") && !strings.HasPrefix(name, "ip6-") && !strings.Contains(name, "localhost") {
				return name
			}
		}
	}
	t.Skip("the host's /etc/hosts names nothing but localhost: the name test needs a name the host resolves without the network")
	return ""
}

// safeToAsk reports whether a connection to addr from the host never leaves it
// (the kernel's route is local, broadcast or multicast), so a proxy that wrongly
// dials it sends nothing on the network. Only `ip route get` is run: no traffic.
func safeToAsk(t *testing.T, addr string) bool {
	out, err := exec.Command("ip", "route", "get", addr).Output()
	if err != nil {
		t.Logf("ip route get %s: %v", addr, err)
		return false
	}
	f := strings.Fields(string(out))
	return len(f) > 0 && (f[0] == "local" || f[0] == "broadcast" || f[0] == "multicast")
}

// Findings 5 and 6: the egress proxy resolves with the host's resolver, never with
// a name server the sandbox chose, and refuses the IANA special-purpose ranges,
// multicast, broadcast and the host's directly connected subnets.
func testHostileEgress(t *testing.T, k rootKind) {
	name := hostFileName(t)
	r := make([]byte, 3)
	rand.Read(r)
	trapAddr := fmt.Sprintf("127.%d.%d.%d", 1+r[0]%250, r[1], 1+r[2]%250)
	queries := dnsTrap(t, trapAddr)
	b := newHostileBox(t, k, engine.Spec{Egress: true})

	t.Run("resolv.conf", func(t *testing.T) {
		script := fmt.Sprintf(`set -e
echo "nameserver %[1]s" > /etc/resolv.conf
echo "hosts: dns" > /etc/nsswitch.conf
echo "127.0.0.1 localhost" > /etc/hosts
%[2]s dns %[1]s /tmp/dns.log 20 > /tmp/dns.out 2>&1 &
i=0; while [ $i -lt 50 ] && ! grep -q listening /tmp/dns.out; do sleep 0.1; i=$((i+1)); done
%[2]s proxy %[3]s
kill $! 2>/dev/null || true
echo "inside server: $(cat /tmp/dns.out)"
echo "inside queries: $(cat /tmp/dns.log 2>/dev/null)"`, trapAddr, hostileProbePath, name)
		out, code := b.sh(t, script)
		if code != 0 && !strings.Contains(out, "status") {
			t.Logf("root inside could not point the resolver at %s (exit %d): %q", trapAddr, code, out)
		}
		if q := queries(); len(q) > 0 {
			t.Errorf("the egress proxy asked the name server the sandbox chose (%s:53 on the host's loopback) for %q: %v\ninside: %s", trapAddr, name, q, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if q, ok := strings.CutPrefix(line, "inside queries: "); ok && strings.TrimSpace(q) != "" {
				t.Errorf("the egress proxy asked the sandbox's own name server (%s:53 inside) for %q: %s", trapAddr, q, out)
			}
		}
	})

	t.Run("special ranges", func(t *testing.T) {
		targets := map[string]string{
			"198.51.100.7":    "TEST-NET-2",
			"203.0.113.7":     "TEST-NET-3",
			"224.0.0.1":       "multicast",
			"239.255.255.250": "multicast",
			"255.255.255.255": "broadcast",
		}
		// TEST-NET-1 (192.0.2.0/24) may be a real network of this machine: ask only
		// for an address whose route never leaves the host.
		for _, a := range []string{"192.0.2.255", "192.0.2.0"} {
			if safeToAsk(t, a) {
				targets[a] = "TEST-NET-1"
			}
		}
		ifaces, _ := net.InterfaceAddrs()
		for _, ia := range ifaces {
			ipn, ok := ia.(*net.IPNet)
			if !ok || ipn.IP.To4() == nil || ipn.IP.IsLoopback() {
				continue
			}
			ones, bits := ipn.Mask.Size()
			if bits-ones < 2 {
				continue
			}
			ip := ipn.IP.To4()
			bcast := make(net.IP, 4)
			for i := range ip {
				bcast[i] = ip[i] | ^ipn.Mask[i]
			}
			targets[ip.String()] = "the host's own address on " + ipn.String()
			if safeToAsk(t, bcast.String()) {
				targets[bcast.String()] = "the broadcast of the host's subnet " + ipn.String()
			} else {
				t.Logf("the host's subnet %s: its broadcast %s is not local here, not asked", ipn, bcast)
			}
		}
		hosts := make([]string, 0, len(targets))
		for h := range targets {
			hosts = append(hosts, h)
		}
		slices.Sort(hosts)
		out, _ := b.sh(t, hostileProbePath+" proxy "+strings.Join(hosts, " "))
		seen := map[string]int{}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 4 || f[0] != "status" {
				continue
			}
			seen[f[1]]++
			if f[3] != "403" {
				t.Errorf("the proxy answered %s to %s %s (%s); want 403, refused before dialing", strings.Join(f[3:], " "), f[2], f[1], targets[f[1]])
			}
		}
		for _, h := range hosts {
			if seen[h] != 2 {
				t.Errorf("no answer of the proxy for %s (%s):\n%s", h, targets[h], out)
			}
		}
	})
}

// Finding 4: root inside is not root outside: what it creates is owned by a host
// uid other than 0, and a setuid file it makes is never setuid-root on the host,
// not even in a snapshot. The data dir is 0700 once the engine used it.
func testHostileRootNotRoot(t *testing.T, k rootKind) {
	b := newHostileBox(t, k, engine.Spec{})
	out, code := b.sh(t, "touch /home/user/hostile-root && cp "+hostileProbePath+" /home/user/hostile-suid && chown 0:0 /home/user/hostile-suid && chmod 6755 /home/user/hostile-suid && ls -ln /home/user/hostile-suid")
	if code != 0 {
		t.Fatalf("make a setuid-root file inside: %q (exit %d)", out, code)
	}
	if b.info.Home == "" {
		t.Fatal("Info.Home is empty: the host path of the sandbox's home")
	}
	for _, f := range []string{"hostile-root", "hostile-suid"} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(b.info.Home, f), &st); err != nil {
			t.Errorf("the file root made inside, seen from the host: %v", err)
		} else if st.Uid == 0 || st.Gid == 0 {
			t.Errorf("/home/user/%s, made by root inside, is owned by %d:%d on the host; want the sandbox's ids", f, st.Uid, st.Gid)
		}
	}
	snap, err := b.e.Snapshot(t.Context(), b.info.ID)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	roots := []string{b.dataDir}
	if b.store != nil {
		t.Cleanup(func() { b.store.Remove(context.Background(), snap) })
		fsys, err := b.store.ResolveImage(t.Context(), snap)
		if err != nil {
			t.Fatalf("the snapshot %s in the store: %v", snap, err)
		}
		roots = append(roots, fsys.Layers...)
	}
	var setuidRoot []string
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			var st unix.Stat_t
			if unix.Lstat(p, &st) != nil {
				return nil
			}
			if (st.Mode&unix.S_ISUID != 0 && st.Uid == 0) || (st.Mode&unix.S_ISGID != 0 && st.Gid == 0) {
				setuidRoot = append(setuidRoot, fmt.Sprintf("%s (%o %d:%d)", p, st.Mode&0o7777, st.Uid, st.Gid))
			}
			return nil
		})
	}
	if len(setuidRoot) > 0 {
		t.Errorf("%d files set-id to the host's root after a snapshot (any host user can run them as root), e.g.:\n%s",
			len(setuidRoot), strings.Join(setuidRoot[:min(10, len(setuidRoot))], "\n"))
	}
	if fi, err := os.Stat(b.dataDir); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("the data dir (made 0755 before the engine) is %v (%v); want 0700 once the engine used it", fi.Mode().Perm(), err)
	}
}

// hostileScriptNames are the attempts hostile.sh must report, each once.
var hostileScriptNames = append([]string{"fd-self", "fds", "resolv-conf", "usr-local-bin", "cgroupns",
	"mask:/proc/interrupts", "mask:/proc/kcore", "mask:/proc/keys", "mask:/proc/latency_stats", "mask:/proc/timer_list",
	"mask:/proc/timer_stats", "mask:/proc/sched_debug", "mask:/proc/acpi", "mask:/proc/asound", "mask:/proc/scsi",
	"mask:/sys/firmware", "mask:/sys/devices/virtual/powercap",
	"ro:/proc/bus", "ro:/proc/fs", "ro:/proc/irq", "ro:/proc/sys", "ro:/proc/sys/kernel/core_pattern", "ro:/proc/sysrq-trigger",
	"host-etc:/etc/gitconfig", "host-etc:/etc/environment", "host-etc:/etc/profile.d", "host-profile-d", "userns",
	"cap:net_admin", "cap:net_raw", "cap:sys_module", "cap:sys_rawio", "cap:sys_ptrace", "cap:sys_admin", "cap:sys_boot",
	"cap:sys_resource", "cap:sys_time", "cap:mknod", "cap:syslog", "cap:perfmon", "cap:bpf",
	"block-devices", "mknod", "mount", "sethostname", "init-environ"}, hostileSyscalls...)

// Every finding in one go: hostile.sh as root inside, on a sandbox with tunnels and
// egress, while the test holds an inherited descriptor and a name server trap.
func testHostileScript(t *testing.T, k rootKind) {
	script, err := os.ReadFile("testdata/hostile/hostile.sh")
	if err != nil {
		t.Fatal(err)
	}
	name := hostFileName(t)
	e, base, dataDir, s := hostileEngine(t, k)
	hostileProbe(t)
	ids := []string{}
	for _, p := range []string{"/etc/gitconfig", "/etc/environment", "/etc/profile.d"} {
		ids = append(ids, p+"="+hostMarker(t, p))
	}
	profileMarker := "zz-hostile-" + randomWord(t) + ".sh"
	hostMarker(t, filepath.Join("/etc/profile.d", profileMarker))
	r := make([]byte, 3)
	rand.Read(r)
	trapAddr := fmt.Sprintf("127.%d.%d.%d", 1+r[0]%250, r[1], 1+r[2]%250)
	queries := dnsTrap(t, trapAddr)
	mark := "hostile-fd-" + randomWord(t)
	dir := filepath.Join(t.TempDir(), mark)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY, 0) // inherited by what the engine starts
	if err != nil {
		t.Fatal(err)
	}
	b := hostileBox{e: e, dataDir: dataDir, store: s}.create(t, k, base, engine.Spec{Ports: []int{7000}, Egress: true})
	syscall.Close(fd)
	if err := b.e.WriteFile(t.Context(), b.info.ID, "/tmp/hostile.sh", script, 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := b.sh(t, "sh /tmp/hostile.sh", "ROOT_KIND="+k.name, "PROBE="+hostileProbePath, "MARKERS="+mark, "HOST_IDS="+strings.Join(ids, " "),
		"PROFILE_MARKER="+profileMarker, "DNS_ADDR="+trapAddr, "DNS_NAME="+name)
	t.Logf("hostile.sh on the %s root (exit %d):\n%s", k.name, code, out)
	if !strings.HasSuffix(out, "done\n") {
		t.Errorf("hostile.sh did not run to its end (exit %d)", code)
	}
	names := brokenLines(t, "hostile.sh", out)
	for _, n := range hostileScriptNames {
		if !names[n] {
			t.Errorf("hostile.sh printed no line for %s", n)
		}
	}
	if q := queries(); len(q) > 0 {
		t.Errorf("BROKEN resolv-conf-host: the egress proxy asked the name server the sandbox chose (%s:53 on the host's loopback): %v", trapAddr, q)
	}
}
