package local

// The OCI runtime that runs the sandboxes: runc by default. Another runtime of the
// machine is offered only once it passes the engine contract suite's isolation checks
// here; until then a Spec.Runtime naming it is refused with the reason.

import (
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/proliferate-ai/sandbox-mcp/provider/engine"
)

// runtimeRunc is the default runtime, and the only one this engine offers today.
const runtimeRunc = "runc"

// runtimeNone is an unisolated sandbox: host processes.
const runtimeNone = "none"

// runtimePackages are the OCI runtimes this engine knows, with the Debian package that
// installs each.
var runtimePackages = map[string]string{
	"runc": "runc", "runsc": "runsc", "crun": "crun", "youki": "youki", "kata-runtime": "kata-containers",
}

// runtimeRefusals say why a runtime of this machine is not offered.
var runtimeRefusals = map[string]string{
	"runsc": gvisorRefusal,
}

// findRuntime finds a runtime's binary, or says which package installs it.
func findRuntime(name string) (string, error) {
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

// runtimeRoot is the runtime's state directory (--root): under the data dir, so
// engines of other data dirs never share container names.
func (e *Engine) runtimeRoot() string { return filepath.Join(e.dir, "runtime") }

// checkRuntime refuses a runtime this engine does not offer, with the reason.
func (e *Engine) checkRuntime(name string) (string, error) {
	def := e.caps.Runtimes[0]
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
		why = "not an OCI runtime this engine knows"
	default:
		if _, err := exec.LookPath(name); err != nil {
			why = "not installed (Debian package " + runtimePackages[name] + ")"
		} else {
			why = "installed, but it has not passed the engine contract suite's isolation checks on this machine"
		}
	}
	return "", fmt.Errorf("runtime %q: this engine offers %v (%s): %w", name, e.caps.Runtimes, why, engine.ErrUnsupported)
}
