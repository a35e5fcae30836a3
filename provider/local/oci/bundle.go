// Package oci is the local engine's OCI runtime and the bundle it runs: which runtime
// (runc by default; others refused with the reason) and the sandbox's config.json.
// Package local, the engine, is its one importer; its shim writes the bundle and runs
// the runtime.
//
// The OCI bundle of a sandbox: config.json built from the runtime-spec types with
// Docker's defaults (capabilities less CAP_MKNOD and CAP_NET_RAW, masked and read-only
// paths, the moby default seccomp profile as an allow-list), a user namespace with the
// sandbox's id mapping, a cgroup, pid, ipc, uts, mount and (unless the spec shares the
// host's network) network namespace, and the sandbox's limits. The runtime (runc by
// default) makes this boundary once, at create; our init runs inside it as PID 1.
package oci

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// InitPath is where the engine's own binary is bound, read-only, inside every
// sandbox: PID 1 runs it in its init mode.
const InitPath = "/dev/.sandbox-init"

// TTYGID is group tty inside: the owner of the sandbox's pseudo-terminals.
const TTYGID = 5

// defaultCaps are Docker's default capabilities less CAP_MKNOD and CAP_NET_RAW (moby
// oci/caps/defaults.go). They hold in the sandbox's user namespace only.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID",
	"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// maskedPaths are Docker's masked paths (moby oci/defaults.go): /dev/null over files,
// an empty read-only tmpfs over directories.
var maskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
	"/sys/devices/virtual/powercap",
}

// readonlyPaths are Docker's read-only paths.
var readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}

// InitOOMScoreAdj is init's OOM score: never the victim while a command is there to
// take (the commands run at CmdOOMScoreAdj). The runtime would write it from inside
// the user namespace, where lowering a score is refused, so the shim writes it from
// the host between create and start.
const (
	InitOOMScoreAdj = -1000
	CmdOOMScoreAdj  = 1000
)

// Config is what a sandbox's config.json is made from.
type Config struct {
	ID string
	// Root is the root file system, prepared by the shim; ReadOnly for the host's
	// system directories (the default root), writable for an image's overlay.
	Root     string
	ReadOnly bool
	// Init is the host path of the binary bound at InitPath, and Env init's whole
	// environment (its mode and PATH).
	Init string
	Env  []string
	// NetNS gives the sandbox a network namespace of its own (else the host's).
	NetNS bool
	// Limits are the sandbox's limits (zero fields are not limited).
	Limits engine.Limits
	// Cgroup is the cgroups path, relative to the runtime's own cgroup.
	Cgroup string
}

// Spec is the sandbox's runtime configuration.
func Spec(c Config) (*specs.Spec, error) {
	if c.ID == "" || c.Root == "" || c.Init == "" {
		return nil, fmt.Errorf("oci spec: ID, Root and Init are required")
	}
	caps := append([]string(nil), defaultCaps...)
	s := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: c.Root, Readonly: c.ReadOnly},
		Hostname: c.ID,
		Process: &specs.Process{
			User: specs.User{UID: 0, GID: 0},
			Args: []string{InitPath, "sandbox-init"},
			Env:  append([]string(nil), c.Env...),
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
			// Root inside may use sudo and setuid programs.
			NoNewPrivileges: false,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=" + strconv.Itoa(TTYGID)}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=" + strconv.FormatInt(rules.DefaultShmBytes, 10)}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			sysMount(c.NetNS),
			{Destination: InitPath, Type: "bind", Source: c.Init, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: rules.HostIDBase, Size: rules.IDCount}},
			GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: rules.HostIDBase, Size: rules.IDCount}},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.CgroupNamespace}, {Type: specs.UserNamespace},
			},
			CgroupsPath:   c.Cgroup,
			Resources:     resources(c.Limits),
			MaskedPaths:   append([]string(nil), maskedPaths...),
			ReadonlyPaths: append([]string(nil), readonlyPaths...),
		},
	}
	if c.NetNS {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace})
	}
	sc, err := seccomp.GetDefaultProfile(s)
	if err != nil {
		return nil, fmt.Errorf("oci spec: seccomp profile: %w", err)
	}
	s.Linux.Seccomp = sc
	return s, nil
}

// sysMount is /sys: a sysfs of the sandbox's network namespace, or, sharing the
// host's network (where a user namespace may not mount sysfs), the host's read-only.
func sysMount(netns bool) specs.Mount {
	if netns {
		return specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}}
	}
	return specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}
}

// resources are the sandbox's cgroup limits: every device denied but the runtime's
// defaults, memory without swap, pids, and CPU as a quota of 100 ms periods.
func resources(l engine.Limits) *specs.LinuxResources {
	r := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &m}
	}
	if l.Pids > 0 {
		p := l.Pids
		r.Pids = &specs.LinuxPids{Limit: &p}
	}
	if l.CPUMillis > 0 {
		period := uint64(100000)
		quota := l.CPUMillis * 100
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	return r
}

// WriteBundle writes the bundle of c into dir (config.json) and returns dir.
func WriteBundle(dir string, c Config) (string, error) {
	spec, err := Spec(c)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return "", fmt.Errorf("write the bundle: %w", err)
	}
	return dir, nil
}
