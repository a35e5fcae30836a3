package modal

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	modalsdk "github.com/modal-labs/modal-client/go"

	"github.com/proliferate-ai/sandbox-mcp/provider"
	"github.com/proliferate-ai/sandbox-mcp/provider/image"
)

// BaseImage is the sandbox image on Modal: the one image definition (provider/image)
// and the URLs our static binaries are downloaded from there. The SDK builds it on
// Modal (cached by Modal under the same commands), and its key feeds the base snapshot
// version key.
type BaseImage struct {
	// Def is the image; its copy steps cannot be rendered for Modal.
	Def image.Image
	// Binaries maps a binary step's name to the URL of its static binary (sandbox-mcp,
	// proliferate). A binary without a URL is left out.
	Binaries map[string]string
}

// DefaultBaseImage is image.Default with the binaries from SANDBOX_MCP_BINARY_URL and
// PROLIFERATE_BINARY_URL when set.
func DefaultBaseImage(getenv func(string) string) BaseImage {
	return BaseImage{
		Def: image.Default(),
		Binaries: map[string]string{
			"sandbox-mcp": strings.TrimSpace(getenv(provider.EnvSandboxMCPBinaryURL)),
			"proliferate": strings.TrimSpace(getenv(provider.EnvProliferateBinaryURL)),
		},
	}
}

// Commands are the image's Dockerfile commands after FROM, as Modal runs them.
func (b BaseImage) Commands() ([]string, error) { return b.Def.Commands(b.Binaries) }

// Definition is the image as Dockerfile text: FROM and Commands.
func (b BaseImage) Definition() (string, error) {
	cmds, err := b.Commands()
	if err != nil {
		return "", err
	}
	return "FROM " + b.Def.From + "\n" + strings.Join(append(cmds, ""), "\n"), nil
}

// Image is the image through the SDK, built lazily by the create that uses it.
func (b BaseImage) Image(c *modalsdk.Client) (*modalsdk.Image, error) {
	cmds, err := b.Commands()
	if err != nil {
		return nil, err
	}
	return c.Images.FromRegistry(b.Def.From, nil).DockerfileCommands(cmds, nil), nil
}

// BaseSnapshotVersionKey is provider.ComputeBaseSnapshotVersionKey extended with the
// key of the image as Modal builds it (binary URLs included): a change to either means
// a new base snapshot.
func BaseSnapshotVersionKey(getenv func(string) string, b BaseImage) string {
	key, err := b.Def.Key(b.Def.From, image.Sources{BinaryURLs: b.Binaries})
	if err != nil {
		key = err.Error() // unreachable: URL sources read no files; still a stable input
	}
	h := sha256.New()
	h.Write([]byte(provider.ComputeBaseSnapshotVersionKey(getenv)))
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil))
}
