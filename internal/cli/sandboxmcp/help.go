package sandboxmcp

import (
	"fmt"
	"io"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/internal/config"
	"github.com/proliferate-ai/sandbox-mcp/internal/version"
)

const usageHead = `usage: sandbox-mcp <command> [flags]

The sandbox sidecar. Run "sandbox-mcp <command> --help" for a command's flags.

commands:
  api          serve the HTTP API and the terminal WebSocket
  mcp          serve the service manager as MCP tools over stdio
  bastion      serve a bastion session's controller: ingress and git gate
  relay        serve a bastion agent's side of the link on a unix socket
  version      print the version (also --version)
  completion   print a shell completion script: bash, zsh or fish
  help         print this help (also --help)
`

const apiHead = `usage: sandbox-mcp api [--addr HOST:PORT]

Serve the HTTP API (health, services, logs, events, expose, git, ports) and the
terminal WebSocket on one listener until SIGINT or SIGTERM. Without a token in
the environment it generates one and prints an export line for it on stderr.

flags:
  --addr HOST:PORT   listen address (default: $SANDBOX_MCP_ADDR, else 0.0.0.0:4000)
`

const mcpHead = `usage: sandbox-mcp mcp

Serve the service manager as MCP tools over stdin/stdout (JSON-RPC, one message
per line); logs go to stderr. Calls go through the API at
$PROLIFERATE_SANDBOX_MCP_URL when it answers, else act on the state dir directly.
`

// writeHelp prints head, then every environment setting the sidecar reads.
func writeHelp(w io.Writer, head string) {
	fmt.Fprint(w, head)
	fmt.Fprint(w, "\nenvironment:\n")
	config.WriteSettings(w, true)
}

// isHelp reports whether args ask for help.
func isHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// writeVersion prints the one-line version.
func writeVersion(w io.Writer) { fmt.Fprintf(w, "sandbox-mcp %s\n", version.String()) }

var commands = []string{"api", "mcp", "bastion", "relay", "version", "completion", "help"}

// completionScripts complete commands and the api flag; nothing else takes
// arguments worth completing.
var completionScripts = map[string]string{
	"bash": `# bash completion for sandbox-mcp; load with: source <(sandbox-mcp completion bash)
_sandbox_mcp() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{{commands}} --help --version" -- "$cur"))
  elif [ "${COMP_WORDS[1]}" = api ]; then
    COMPREPLY=($(compgen -W "--addr --help" -- "$cur"))
  elif [ "${COMP_WORDS[1]}" = completion ]; then
    COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur"))
  fi
}
complete -F _sandbox_mcp sandbox-mcp
`,
	"zsh": `#compdef sandbox-mcp
# zsh completion for sandbox-mcp; load with: source <(sandbox-mcp completion zsh)
_sandbox_mcp() {
  if (( CURRENT == 2 )); then
    compadd -- {{commands}} --help --version
  elif [[ $words[2] == api ]]; then
    compadd -- --addr --help
  elif [[ $words[2] == completion ]]; then
    compadd -- bash zsh fish
  fi
}
compdef _sandbox_mcp sandbox-mcp
`,
	"fish": `# fish completion for sandbox-mcp; load with: sandbox-mcp completion fish | source
complete -c sandbox-mcp -f
complete -c sandbox-mcp -n __fish_use_subcommand -a '{{commands}}'
complete -c sandbox-mcp -n '__fish_seen_subcommand_from api' -l addr -r -d 'listen address'
complete -c sandbox-mcp -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'
`,
}

// runCompletion prints the completion script for the shell in args.
func runCompletion(args []string, stdout, stderr io.Writer) int {
	if isHelp(args) {
		fmt.Fprint(stdout, "usage: sandbox-mcp completion bash|zsh|fish\n")
		return 0
	}
	if len(args) != 1 || completionScripts[args[0]] == "" {
		fmt.Fprint(stderr, "usage: sandbox-mcp completion bash|zsh|fish\n")
		return 1
	}
	fmt.Fprint(stdout, strings.ReplaceAll(completionScripts[args[0]], "{{commands}}", strings.Join(commands, " ")))
	return 0
}
