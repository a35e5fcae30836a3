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

// The bastion pair as the engine and its two sandboxes see it.
const (
	// PortBastionIngress is the controller's ingress, its only tunnel: the
	// platform's requests for the agent's ports arrive here.
	PortBastionIngress = 20100
	// BastionHealthPath is the controller's one unauthenticated path: it says
	// the ingress and the git gate run, and reaches nothing of the agent.
	BastionHealthPath = "/_bastion/health"
	// BastionDir is the directory, at the top of the shared workspace volume,
	// that holds the link's sockets.
	BastionDir = ".bastion"
	// BastionGitSocket is the git gate's unix socket in BastionDir, served by
	// the controller.
	BastionGitSocket = "git.sock"
	// BastionRelaySocket is the relay's unix socket in BastionDir, served by
	// the agent: the controller's ingress reaches the agent's ports through it.
	BastionRelaySocket = "relay.sock"
	// BastionRelayMaxPreamble bounds the line that opens every relay
	// connection ("port <n>\n").
	BastionRelayMaxPreamble = 16
	// BastionGitDir is where the controller keeps the repository's git
	// directory, in its own home, out of the agent's reach.
	BastionGitDir = HomeDir + "/.bastion-git"
	// EnvBastionToken holds the platform's token in the controller's
	// environment only; the ingress checks it.
	EnvBastionToken = "SANDBOX_BASTION_TOKEN"
	// EnvBastionGitToken holds the git remote's credential in the
	// controller's environment only; the git gate sends it.
	EnvBastionGitToken = "SANDBOX_BASTION_GIT_TOKEN"
	// EnvBastionAgentToken holds, in the controller's environment, the token
	// of the agent's sidecar, which the ingress sends on requests for the
	// sidecar's port in place of the platform's.
	EnvBastionAgentToken = "SANDBOX_BASTION_AGENT_TOKEN"
	// LabelRole and LabelSession label both sandboxes of a pair: the role
	// (RoleAgent, RoleController) and the session they share.
	LabelRole    = "role"
	LabelSession = "session"
	// RoleAgent and RoleController are the values of LabelRole.
	RoleAgent      = "agent"
	RoleController = "controller"
)
