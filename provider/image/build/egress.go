package build

// A build step runs code from an image definition (a Dockerfile's RUN, a Modal
// client's dockerfileCommands): it gets what a sandbox gets, never the host's network.
// Its sandbox has its own network namespace and reaches the outside only through the
// sandboxes' egress proxy (Spec.Egress), and only the package mirrors a step installs
// from (Spec.EgressHosts). apt honours http_proxy, npm and pip HTTPS_PROXY, which the
// engine sets for every command of a sandbox with egress.

import (
	"bufio"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/image/debian"
)

// StandardMirrors are the package mirrors every build step may reach: Debian's
// archive and security mirrors (which images' apt sources name), the npm registry
// and PyPI with the host of its files.
var StandardMirrors = []string{"deb.debian.org", "security.debian.org", "registry.npmjs.org", "pypi.org", "files.pythonhosted.org"}

// DefaultEgressHosts are the hosts a build step may reach when EngineRunner.EgressHosts
// is nil: StandardMirrors, the Debian mirror of the machine's apt sources (which the
// Debian bases are built from: debian.MachineMirror) and the npm registry of the
// machine's npm configuration.
func DefaultEgressHosts() []string {
	hosts := slices.Clone(StandardMirrors)
	if h := urlHost(debian.MachineMirror("/etc/apt")); h != "" {
		hosts = append(hosts, h)
	}
	home, _ := os.UserHomeDir()
	npmrcs := []string{"/etc/npmrc", "/usr/etc/npmrc", "/usr/local/etc/npmrc"}
	if home != "" {
		npmrcs = append(npmrcs, filepath.Join(home, ".npmrc"))
	}
	for _, f := range npmrcs {
		if h := urlHost(npmRegistry(f)); h != "" {
			hosts = append(hosts, h)
		}
	}
	if h := urlHost(os.Getenv("NPM_CONFIG_REGISTRY")); h != "" {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

// npmRegistry is the registry= setting of the npmrc file f ("" when none).
func npmRegistry(f string) string {
	file, err := os.Open(f)
	if err != nil {
		return ""
	}
	defer file.Close()
	reg := ""
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if ok && strings.TrimSpace(k) == "registry" {
			reg = strings.TrimSpace(v)
		}
	}
	return reg
}

// urlHost is the host name of an http(s) URL, "" for anything else.
func urlHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return ""
	}
	return strings.ToLower(u.Hostname())
}
