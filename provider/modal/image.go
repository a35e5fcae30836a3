package modal

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider"
)

// BaseImage is the sandbox image defined in Go: a Debian base, the packages the boot
// needs, the platform's user and paths, and our static binaries fetched by URL (curl, installed by the apt step). It
// replaces the Python deploy.py/get_image_id step: the SDK builds it on Modal (cached
// by Modal under the same definition), and its Definition feeds the base snapshot
// version key.
type BaseImage struct {
	// From is the registry image the build starts from.
	From string
	// Packages are installed with apt-get.
	Packages []string
	// Binaries maps a program name to the URL of its static binary, installed in
	// /usr/local/bin (sandbox-mcp, proliferate). Empty URLs are left out.
	Binaries map[string]string
}

// DefaultBaseImage is Debian bookworm-slim with git, caddy and the boot's tools; the
// binaries come from SANDBOX_MCP_BINARY_URL and PROLIFERATE_BINARY_URL when set.
func DefaultBaseImage(getenv func(string) string) BaseImage {
	return BaseImage{
		From:     "debian:bookworm-slim",
		Packages: []string{"bash", "ca-certificates", "caddy", "coreutils", "curl", "findutils", "git", "jq", "openssh-server", "procps", "sudo"},
		Binaries: map[string]string{
			"sandbox-mcp": strings.TrimSpace(getenv("SANDBOX_MCP_BINARY_URL")),
			"proliferate": strings.TrimSpace(getenv("PROLIFERATE_BINARY_URL")),
		},
	}
}

// Commands are the image's Dockerfile commands after FROM.
func (b BaseImage) Commands() []string {
	p := provider.DefaultPaths()
	cmds := []string{
		"ENV DEBIAN_FRONTEND=noninteractive",
		"RUN apt-get update && apt-get install -y --no-install-recommends " + strings.Join(b.Packages, " ") + " && rm -rf /var/lib/apt/lists/*",
		"RUN useradd --create-home --home-dir " + p.Home + " --shell /bin/bash user && echo 'user ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/user",
		"RUN mkdir -p " + p.Workspace() + " " + p.Home + "/.proliferate " + p.GlobalPluginDir() + " " + p.PreinstalledToolsDir() + " && chown -R user:user " + p.Home,
	}
	for _, name := range slices.Sorted(maps.Keys(b.Binaries)) {
		if url := b.Binaries[name]; url != "" {
			dst := "/usr/local/bin/" + name
			cmds = append(cmds, "RUN curl -fsSL "+provider.ShellEscape(url)+" -o "+dst+" && chmod 755 "+dst)
		}
	}
	return append(cmds, "WORKDIR "+p.Home)
}

// Definition is the image as Dockerfile text: FROM and Commands.
func (b BaseImage) Definition() string {
	return "FROM " + b.From + "\n" + strings.Join(b.Commands(), "\n") + "\n"
}

// Image is the image through the SDK, built lazily by the create that uses it.
func (b BaseImage) Image(c *modalsdk.Client) *modalsdk.Image {
	return c.Images.FromRegistry(b.From, nil).DockerfileCommands(b.Commands(), nil)
}

// BaseSnapshotVersionKey is provider.ComputeBaseSnapshotVersionKey extended with the
// base image's definition: a change to either means a new base snapshot.
func BaseSnapshotVersionKey(getenv func(string) string, b BaseImage) string {
	h := sha256.New()
	h.Write([]byte(provider.ComputeBaseSnapshotVersionKey(getenv)))
	h.Write([]byte(b.Definition()))
	return hex.EncodeToString(h.Sum(nil))
}
