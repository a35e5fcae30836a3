package oci

// The OCI runtime that runs the sandboxes: runc by default. Another runtime of the
// machine is offered only once it passes the engine contract suite's isolation checks
// here; until then a Spec.Runtime naming it is refused with the reason.

import (
	"fmt"
	"os/exec"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// Runc is the default runtime, and the only one the engine offers today.
const Runc = "runc"

// None is the runtime of an unisolated sandbox: host processes.
const None = "none"

// gvisorRefusal is why the engine does not offer gVisor, as measured with Debian
// 12's runsc (0.0~20221219) on cgroup v1 (docs/local-engine.md, "gVisor: measured,
// refused"; TestGvisorRefusalStillHolds in package local checks the first reason).
const gvisorRefusal = "gVisor: Debian's runsc 2022-12 answers EINVAL to statx and newfstatat with " +
	"AT_NO_AUTOMOUNT, so ls and stat fail on every path; it has no OOM killer, so an over-limit " +
	"allocation kills the whole sandbox, sidecar included; and it enforces no pids limit but " +
	"RLIMIT_NPROC per uid"

// runtimePackages are the OCI runtimes the engine knows, with the Debian package that
// installs each.
var runtimePackages = map[string]string{
	"runc": "runc", "runsc": "runsc", "crun": "crun", "youki": "youki", "kata-runtime": "kata-containers",
}

// runtimeRefusals say why a runtime of this machine is not offered.
var runtimeRefusals = map[string]string{
	"runsc": gvisorRefusal,
}

// Find finds a runtime's binary, or says which package installs it
// (engine.ErrNotIsolated).
func Find(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		pkg := runtimePackages[name]
		if pkg == "" {
			pkg = name
		}
		return "", fmt.Errorf("%w: no OCI runtime %q on this machine: install the Debian package %s (apt-get install %s), or opt into unisolated mode, which has no isolation",
			engine.ErrNotIsolated, name, pkg, pkg)
	}
	return p, nil
}

// Check returns the runtime a spec's name asks for among offered (the first is the
// default, asked for by ""), and refuses any other with the reason
// (engine.ErrUnsupported).
func Check(name string, offered []string) (string, error) {
	def := offered[0]
	if name == "" || name == def {
		return def, nil
	}
	if name == "gvisor" {
		name = "runsc"
	}
	why := runtimeRefusals[name]
	switch {
	case why != "":
	case runtimePackages[name] == "":
		why = "not an OCI runtime the engine knows"
	default:
		if _, err := exec.LookPath(name); err != nil {
			why = "not installed (Debian package " + runtimePackages[name] + ")"
		} else {
			why = "installed, but it has not passed the engine contract suite's isolation checks on this machine"
		}
	}
	return "", fmt.Errorf("runtime %q: the engine offers %v (%s): %w", name, offered, why, engine.ErrUnsupported)
}
