package oci

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// TestOCISpecDefaults checks the bundle's boundary against Docker's defaults.
func TestOCISpecDefaults(t *testing.T) {
	s, err := Spec(Config{ID: "sb-x", Root: "/r", Init: "/i", NetNS: true,
		Limits: engine.Limits{MemoryBytes: 256 << 20, Pids: 64, CPUMillis: 500}, Cgroup: "sandbox-sb-x"})
	if err != nil {
		t.Fatal(err)
	}
	var ns []specs.LinuxNamespaceType
	for _, n := range s.Linux.Namespaces {
		if n.Path != "" {
			t.Errorf("namespace %s joins %s, want a new one", n.Type, n.Path)
		}
		ns = append(ns, n.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.UserNamespace, specs.PIDNamespace, specs.IPCNamespace,
		specs.UTSNamespace, specs.MountNamespace, specs.CgroupNamespace, specs.NetworkNamespace} {
		if !slices.Contains(ns, want) {
			t.Errorf("namespaces %v lack %s", ns, want)
		}
	}
	for _, set := range [][]string{s.Process.Capabilities.Bounding, s.Process.Capabilities.Effective, s.Process.Capabilities.Permitted} {
		for _, c := range []string{"CAP_MKNOD", "CAP_NET_RAW", "CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_NET_ADMIN"} {
			if slices.Contains(set, c) {
				t.Errorf("capabilities %v hold %s", set, c)
			}
		}
	}
	for _, p := range []string{"/proc/interrupts", "/proc/acpi", "/proc/asound", "/proc/scsi", "/proc/timer_stats",
		"/proc/latency_stats", "/sys/firmware", "/sys/devices/virtual/powercap", "/proc/kcore", "/proc/keys"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("masked paths %v lack %s", s.Linux.MaskedPaths, p)
		}
	}
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Errorf("read-only paths %v lack /proc/sys", s.Linux.ReadonlyPaths)
	}
	if m := s.Linux.UIDMappings; len(m) != 1 || m[0].ContainerID != 0 || m[0].HostID == 0 {
		t.Errorf("uid mappings %+v, want 0 → a non-zero host id", m)
	}
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno {
		t.Fatalf("seccomp %+v, want an allow-list (default action errno)", s.Linux.Seccomp)
	}
	for _, sc := range s.Linux.Seccomp.Syscalls {
		if sc.Action == specs.ActAllow && len(sc.Args) == 0 && (slices.Contains(sc.Names, "kcmp") || slices.Contains(sc.Names, "personality")) {
			t.Errorf("seccomp allows %v unconditionally", sc.Names)
		}
	}
	r := s.Linux.Resources
	if r.Memory == nil || *r.Memory.Limit != 256<<20 || r.Pids == nil || *r.Pids.Limit != 64 || r.CPU == nil || *r.CPU.Quota != 50000 {
		t.Errorf("resources %+v, want memory 256 MiB, pids 64, a CPU quota of 50 ms in 100 ms", r)
	}
	for _, m := range s.Mounts {
		if m.Type == "tmpfs" && !slices.ContainsFunc(m.Options, func(o string) bool { return len(o) > 5 && o[:5] == "size=" }) {
			t.Errorf("tmpfs %s has no size: %v", m.Destination, m.Options)
		}
		if m.Type == "bind" && !slices.Contains(m.Options, "ro") {
			t.Errorf("bind %s is writable: %v", m.Destination, m.Options)
		}
	}
	if s.Process.NoNewPrivileges {
		t.Error("no_new_privs is set: sudo inside would not work")
	}
}

func TestOCISpecHostNetwork(t *testing.T) {
	s, err := Spec(Config{ID: "sb-x", Root: "/r", Init: "/i"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range s.Linux.Namespaces {
		if n.Type == specs.NetworkNamespace {
			t.Error("a sandbox sharing the host's network has a network namespace")
		}
	}
	if _, err := Spec(Config{ID: "sb-x"}); err == nil {
		t.Error("a spec without a root and an init was made")
	}
}
