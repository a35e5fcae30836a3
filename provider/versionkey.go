package provider

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/proliferate-ai/sandbox-mcp/provider/image"
)

// DefaultImageVersion is used when SANDBOX_IMAGE_VERSION is unset or empty.
const DefaultImageVersion = "v1.0.0"

// ComputeBaseSnapshotVersionKey is the SHA-256 (lowercase hex) of the files baked into
// a base snapshot: the plugin, the default Caddyfile, the default model's OpenCode
// config, the default image's key (image.Default: its steps, binaries by name), then
// SANDBOX_IMAGE_VERSION. A different key means the base snapshot must be
// rebuilt. The texts are this package's own, so the keys form a new key space, not
// the old code's.
func ComputeBaseSnapshotVersionKey(getenv func(string) string) string {
	p := DefaultPaths()
	h := sha256.New()
	h.Write([]byte(PluginMJS))
	caddyfile, err := defaultCaddyfile(p)
	if err != nil {
		caddyfile = err.Error() // unreachable for DefaultPaths; still a stable key input
	}
	h.Write([]byte(caddyfile))
	h.Write([]byte(NewOpencodeConfig(ToOpencodeModelID(DefaultModelID), OpencodeOptions{LiteLLM: true}).JSON()))
	imageKey, err := image.Default().Key(image.DefaultFrom, image.Sources{})
	if err != nil {
		imageKey = err.Error() // unreachable: empty Sources read no files; still a stable input
	}
	h.Write([]byte(imageKey))
	v := getenv(EnvSandboxImageVersion)
	if v == "" {
		v = DefaultImageVersion
	}
	h.Write([]byte(v))
	return hex.EncodeToString(h.Sum(nil))
}
