package rules

// The bastion session (model C, docs/bastion.md): an agent sandbox with no
// credential and no port of its own, beside a controller sandbox that is its
// only ingress and runs its git.
const (
	// BastionPortPrefix begins the path of every request the controller's
	// ingress forwards: /port/<n>/rest goes to port n of the agent sandbox,
	// as /rest.
	BastionPortPrefix = "/port/"
	// BastionTokenQuery is the query parameter that may carry the platform's
	// token where a header cannot (a browser's WebSocket); the ingress
	// removes it before forwarding.
	BastionTokenQuery = "access_token"
	// BastionGitLockFile is the file, inside the workspace's git directory,
	// that the controller's git gate holds with flock around every command,
	// so that commands on the shared volume never race for index.lock.
	BastionGitLockFile = "sandbox-gitctl.lock"
	// BastionGitMaxOutput bounds the standard output of one git command the
	// gate runs (4 MiB); more is cut and said so.
	BastionGitMaxOutput = 4 << 20
	// BastionGitMaxArgs bounds the arguments of one request to the gate.
	BastionGitMaxArgs = 256
	// BastionGitMaxRequestBytes bounds the body of one request to the gate (256 KiB).
	BastionGitMaxRequestBytes = 256 << 10
)
