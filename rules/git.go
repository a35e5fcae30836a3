package rules

// Tokenless git (docs/git-bundle.md): the sandbox never holds a git token; the
// host pushes the agent's work from a bundle, to the session's own branch only.
const (
	// MaxGitBundleBytes bounds a git bundle the sidecar makes (GET
	// /api/git/bundle, 413 past it) or takes (POST /api/git/bundle), and one
	// the host takes in or hands out (256 MiB).
	MaxGitBundleBytes = 256 << 20
	// SessionBranchPrefix is where every host push of a session goes:
	// SessionBranchPrefix + sessionId, nothing else.
	SessionBranchPrefix = "refs/heads/session/"
	// GitPushMaxFileBytes is the default cap on each new file a push carries (10 MiB).
	GitPushMaxFileBytes = 10 << 20
	// GitPushMaxTotalBytes is the default cap on all new files of a push together (100 MiB).
	GitPushMaxTotalBytes = 100 << 20
)

// GitPushDenyGlobs are the file names a push refuses by default.
func GitPushDenyGlobs() []string { return []string{".env", ".env.*", "*.pem", "id_rsa*"} }
