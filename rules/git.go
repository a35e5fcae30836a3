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
	// GitBundleMaxObjectBytes caps one object of a bundle taken in (host or
	// sidecar), inflated; a delta counts its result (256 MiB).
	GitBundleMaxObjectBytes = 256 << 20
	// GitBundleMaxInflatedBytes caps what the pack of a bundle taken in
	// inflates to, deltas' results included (1 GiB): a zip bomb is refused
	// on its declared sizes, before git inflates it.
	GitBundleMaxInflatedBytes = 1 << 30
	// GitBundleMaxObjects caps the objects of a bundle taken in.
	GitBundleMaxObjects = 5_000_000
	// GitBundleJobs bounds the bundles the sidecar makes or takes at once.
	GitBundleJobs = 2
	// GitMirrorMaxBytes caps one host mirror: past it the mirror is
	// garbage-collected, and a mirror still past it is refused (8 GiB).
	GitMirrorMaxBytes = 8 << 30
)

// GitPushDenyGlobs are the file names a push refuses by default, matched
// against each file's base name (a glob starting with "**/" against the path's
// trailing components, at any depth) after folding both (NFKC, zero-width and
// other invisible characters removed, lower case): a fullwidth ".ｅｎｖ" or
// ".env" followed by a zero-width space is ".env" to a reader. "* " is a name
// with a trailing space, which hides a name from a reader.
func GitPushDenyGlobs() []string {
	return []string{
		".env", ".env.*", ".envrc", "*.pem*", "*.key",
		"id_rsa*", "id_ed25519*", "id_ecdsa*", "id_dsa*",
		".npmrc", ".netrc", ".git-credentials", "credentials.json",
		".pgpass", ".htpasswd", "secrets.yaml", "secrets.yml", "secrets.json",
		"service-account*.json", "*.p12", "*.pfx", "*.jks", "*.keystore",
		"*.tfstate", "*.tfstate.backup",
		"**/.aws/credentials", "**/.kube/config",
		"**/.docker/config.json", "kubeconfig",
		"* ",
	}
}
