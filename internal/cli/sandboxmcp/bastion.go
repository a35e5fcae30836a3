package sandboxmcp

// The two halves of a bastion session (model C, docs/bastion.md) that the
// host side starts in its sandboxes: `sandbox-mcp bastion` in the controller
// sandbox, `sandbox-mcp relay` in the agent sandbox.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/controller"
	"github.com/proliferate-ai/sandbox-mcp/provider/bastion/link"
	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// runBastionCommand runs `bastion` or `relay`.
func runBastionCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if args[0] == "relay" {
		return runRelay(ctx, args[1:], stdout, stderr)
	}
	return runBastion(ctx, args[1:], getenv, stdout, stderr)
}

// parseFlags parses args into fs; --help prints fs's usage on stdout and
// exits 0 like every other command's, a bad flag exits 1 with the usage on
// stderr. ok reports whether the command goes on.
func parseFlags(fs *flag.FlagSet, head string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), head)
		fmt.Fprint(fs.Output(), "\nflags:\n")
		fs.PrintDefaults()
	}
	if isHelp(args) {
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	}
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 1, false
	}
	return 0, true
}

const bastionHead = `usage: sandbox-mcp bastion --ports N[,N...] --relay-socket PATH [flags]

Serve a bastion session's controller (docs/bastion.md): the ingress, which asks
$` + rules.EnvBastionToken + ` of every request and reaches the agent's ports through its
relay, and, with --git-socket, the git gate. It runs until SIGINT or SIGTERM.
`

const relayHead = `usage: sandbox-mcp relay --socket PATH

Serve a bastion agent's side of the link (docs/bastion.md): every connection
to the unix socket names one of the agent's ports and is relayed to it.
`

// runBastion serves the controller: the ingress and the git gate.
func runBastion(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	var cfg controller.Config
	var ports string
	var sidecarPort int
	fs := flag.NewFlagSet("bastion", flag.ContinueOnError)
	fs.StringVar(&cfg.Addr, "addr", ":"+strconv.Itoa(rules.PortBastionIngress), "the ingress' listen address")
	fs.StringVar(&ports, "ports", "", "the agent's ports the ingress opens, comma-separated")
	fs.IntVar(&sidecarPort, "sidecar-port", rules.PortSidecar, "the agent's port that gets $"+rules.EnvBastionAgentToken+" as its bearer token")
	fs.StringVar(&cfg.RelaySocket, "relay-socket", "", "the agent's relay socket on the shared volume")
	fs.StringVar(&cfg.GitSocket, "git-socket", "", "where the git gate listens on the shared volume (empty: no gate)")
	fs.StringVar(&cfg.Git.Workspace, "workspace", "", "the work tree of the repository, on the shared volume")
	fs.StringVar(&cfg.Git.GitDir, "git-dir", "", "the repository's git directory, on the controller's own disk")
	fs.StringVar(&cfg.Git.LockFile, "lock-file", "", "the file flocked around every git command (default: in the git directory)")
	fs.StringVar(&cfg.Git.SessionID, "session", "", "the session whose branch a push writes")
	fs.StringVar(&cfg.Git.Remote.URL, "remote", "", "the http(s) URL of the remote push and fetch go to")
	fs.StringVar(&cfg.Git.UserName, "user-name", "Agent", "the committer's name")
	fs.StringVar(&cfg.Git.UserEmail, "user-email", "agent@sandbox.invalid", "the committer's email")
	if code, ok := parseFlags(fs, bastionHead, args, stdout, stderr); !ok {
		return code
	}
	for _, p := range strings.Split(ports, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			fmt.Fprintf(stderr, "sandbox-mcp bastion: --ports %q: want port numbers separated by commas\n", ports)
			return 1
		}
		cfg.AgentPorts = append(cfg.AgentPorts, n)
	}
	cfg.Token = getenv(rules.EnvBastionToken)
	if cfg.Token == "" {
		fmt.Fprintf(stderr, "sandbox-mcp bastion: $%s is empty: the ingress opens only with the platform's token\n", rules.EnvBastionToken)
		return 1
	}
	cfg.Git.Remote.Token = getenv(rules.EnvBastionGitToken)
	if tok := getenv(rules.EnvBastionAgentToken); tok != "" {
		cfg.UpstreamTokens = map[int]string{sidecarPort: tok}
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(stderr, nil))
	if err := controller.Run(ctx, cfg); err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp bastion: %v\n", err)
		return 1
	}
	return 0
}

// runRelay serves the agent's side of the link.
func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var socket string
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.StringVar(&socket, "socket", "", "the relay's unix socket on the shared volume")
	if code, ok := parseFlags(fs, relayHead, args, stdout, stderr); !ok {
		return code
	}
	if socket == "" {
		fmt.Fprintln(stderr, "sandbox-mcp relay: --socket is required")
		return 1
	}
	ln, err := link.Listen(socket)
	if err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp relay: %v\n", err)
		return 1
	}
	r := &link.Relay{Logger: slog.New(slog.NewJSONHandler(stderr, nil))}
	if err := r.Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "sandbox-mcp relay: %v\n", err)
		return 1
	}
	return 0
}
