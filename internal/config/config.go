// Package config reads the sidecar's settings from the environment in one place.
// cmd/sandbox-mcp and cmd/proliferate import it; of the sidecar's
// settings is read anywhere else (the service monitor's re-exec marker and the
// environment handed to children are process plumbing, not settings).
// Settings is the table of every variable, its default and what it does; the
// binaries' --help and README's settings table are printed from it.
package config

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/proliferate-ai/sandbox-mcp/rules"
)

// Defaults of the wire contract (CONTRACT.md, "Processes and defaults"), spelled
// from package rules.
var (
	DefaultAddr        = "0.0.0.0:" + strconv.Itoa(rules.PortSidecar)
	DefaultPreviewAddr = "127.0.0.1:" + strconv.Itoa(rules.PortPreviewProxy)
	DefaultSidecarURL  = "http://127.0.0.1:" + strconv.Itoa(rules.PortSidecar)
	DefaultCaddyAdmin  = "localhost:" + strconv.Itoa(rules.PortCaddyAdmin)
)

// Paths and other defaults.
const (
	DefaultWorkspaceDir   = rules.WorkspaceDir
	DefaultStateDir       = rules.StateDir
	DefaultCaddySnippet   = rules.CaddySnippet
	DefaultCaddyfile      = rules.Caddyfile
	DefaultPreviewURLFile = rules.PreviewURLFile
	DefaultEnvOverrides   = rules.EnvOverridesFile
	DefaultLogLevel       = "info"
)

// Setting is one environment variable the binaries read.
type Setting struct {
	// Env is the variable's name.
	Env string
	// Default is what applies when it is unset, as a person reads it.
	Default string
	// Help says what it sets.
	Help string
	// Server and CLI say which binaries read it: sandbox-mcp (api, mcp) and
	// proliferate.
	Server, CLI bool
}

// Settings is every environment variable of sandbox-mcp and proliferate, in
// the order help lists them.
var Settings = []Setting{
	{rules.EnvAuthToken, "generated and printed by `api`", "bearer token of the API", true, true},
	{rules.EnvAuthTokenFallback, "—", "read when " + rules.EnvAuthToken + " is unset", true, true},
	{rules.EnvAddr, DefaultAddr, "API listen address (`api --addr` wins)", true, false},
	{rules.EnvWorkspaceDir, DefaultWorkspaceDir + " if it exists, else the working directory", "workspace: services' default cwd, git repos, env files", true, true},
	{rules.EnvStateDir, DefaultStateDir, "state.json and logs/ of the services", true, false},
	{rules.EnvCaddySnippet, DefaultCaddySnippet + " (<state dir>/caddy/user.caddy without " + rules.HomeDir + ")", "user Caddy snippet the sidecar writes", true, false},
	{rules.EnvCaddyAdmin, DefaultCaddyAdmin, "Caddy admin endpoint, host:port or unix//path", true, false},
	{rules.EnvCaddyfile, DefaultCaddyfile, "main Caddyfile loaded when Caddy does not route to the preview proxy", true, false},
	{rules.EnvPreviewAddr, DefaultPreviewAddr, "loopback listener of the preview proxy", true, false},
	{rules.EnvLogLevel, DefaultLogLevel, "log level: info or debug", true, false},
	{rules.EnvGOGC, "50 for `api` (half Go's default)", "Go's garbage collector target, read by the Go runtime", true, false},
	{rules.EnvMaxTerminals, strconv.Itoa(rules.DefaultMaxTerminals), "live terminal sessions at most (1-" + strconv.Itoa(rules.MaxTerminalsCeiling) + "); past it the terminal answers 503", true, false},
	{rules.EnvSidecarURL, DefaultSidecarURL + " (from " + rules.EnvAddr + " when set)", "where the CLI and `mcp` reach the API", true, true},
	{rules.EnvGatewayURL, "—", "platform actions gateway (`proliferate actions`)", false, true},
	{rules.EnvSessionID, "—", "platform session of the actions", false, true},
}

// WriteSettings prints the settings one binary reads (server: sandbox-mcp,
// else proliferate) for --help: the name, then what it sets and its default.
func WriteSettings(w io.Writer, server bool) {
	for _, s := range Settings {
		if (server && s.Server) || (!server && s.CLI) {
			fmt.Fprintf(w, "  %s\n      %s; default: %s\n", s.Env, s.Help, s.Default)
		}
	}
}

// WriteSettingsMarkdown prints Settings as the Markdown table of the README.
func WriteSettingsMarkdown(w io.Writer) {
	fmt.Fprint(w, "| variable | what | default | read by |\n|---|---|---|---|\n")
	for _, s := range Settings {
		var by []string
		if s.Server {
			by = append(by, "sandbox-mcp")
		}
		if s.CLI {
			by = append(by, "proliferate")
		}
		fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", s.Env, s.Help, s.Default, strings.Join(by, ", "))
	}
}

// Config is every setting the sidecar and the CLI take from the environment.
type Config struct {
	// Addr is the API listen address.
	Addr string
	// Token is the bearer token; empty means every protected endpoint answers 401.
	Token string
	// WorkspaceDir is where services start by default and where git repos are found.
	WorkspaceDir string
	// StateDir holds state.json and logs/.
	StateDir string
	// CaddySnippet is the user snippet imported by the sandbox's Caddyfile.
	CaddySnippet string
	// CaddyAdmin is Caddy's admin endpoint: host:port or unix//path.
	CaddyAdmin string
	// Caddyfile is the main Caddyfile that a reload loads.
	Caddyfile string
	// PreviewAddr is the loopback listener of the preview reverse proxy.
	PreviewAddr string
	// PreviewURLFile is read by the MCP tool get_preview_url.
	PreviewURLFile string
	// EnvOverridesFile is read by `proliferate env apply`.
	EnvOverridesFile string
	// SidecarURL is where the CLI and the MCP mode reach the API.
	SidecarURL string
	// SidecarURLFrom names the variable SidecarURL came from, or "" for the default,
	// so errors can say what to change.
	SidecarURLFrom string
	// LogLevel is "info" or "debug".
	LogLevel string
	// GOGC is Go's own GC setting as given; `api` halves Go's default when it is unset.
	GOGC string
	// GatewayURL and SessionID locate the platform's actions gateway.
	GatewayURL string
	SessionID  string
	// MaxTerminals caps live terminal sessions (SANDBOX_MCP_MAX_TERMINALS);
	// 0 means the terminal package's default (64).
	MaxTerminals int
}

// StateFile is the path of the JSON state file.
func (c Config) StateFile() string { return filepath.Join(c.StateDir, rules.StateFileName) }

// LogDir is the folder of the service log files.
func (c Config) LogDir() string { return filepath.Join(c.StateDir, "logs") }

// Load builds a Config from getenv. cwd is the fallback workspace when neither
// WORKSPACE_DIR nor the default workspace exists.
func Load(getenv func(string) string, cwd string) (Config, error) {
	c := Config{
		Addr:             or(getenv(rules.EnvAddr), DefaultAddr),
		StateDir:         or(getenv(rules.EnvStateDir), DefaultStateDir),
		CaddySnippet:     or(getenv(rules.EnvCaddySnippet), DefaultCaddySnippet),
		CaddyAdmin:       or(getenv(rules.EnvCaddyAdmin), DefaultCaddyAdmin),
		Caddyfile:        or(getenv(rules.EnvCaddyfile), DefaultCaddyfile),
		PreviewAddr:      or(getenv(rules.EnvPreviewAddr), DefaultPreviewAddr),
		PreviewURLFile:   DefaultPreviewURLFile,
		EnvOverridesFile: DefaultEnvOverrides,
		LogLevel:         or(getenv(rules.EnvLogLevel), DefaultLogLevel),
		GOGC:             getenv(rules.EnvGOGC),
	}
	cl := LoadClient(getenv)
	c.Token, c.SidecarURL, c.SidecarURLFrom, c.GatewayURL, c.SessionID = cl.Token, cl.SidecarURL, cl.SidecarURLFrom, cl.GatewayURL, cl.SessionID
	if v := getenv(rules.EnvMaxTerminals); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > rules.MaxTerminalsCeiling {
			return Config{}, fmt.Errorf("%s=%q: want a number from 1 to %d", rules.EnvMaxTerminals, v, rules.MaxTerminalsCeiling)
		}
		c.MaxTerminals = n
	}
	ws, err := WorkspaceDir(getenv, cwd)
	if err != nil {
		return Config{}, err
	}
	c.WorkspaceDir = ws
	if !filepath.IsAbs(c.StateDir) {
		sd, err := filepath.Abs(c.StateDir)
		if err != nil {
			return Config{}, fmt.Errorf("resolve state dir %q: %w", c.StateDir, err)
		}
		c.StateDir = sd
	}
	if getenv(rules.EnvCaddySnippet) == "" && !isDir(rules.HomeDir) {
		// Not a sandbox image (a laptop, CI): keep the snippet with the state
		// rather than creating /home/user.
		c.CaddySnippet = filepath.Join(c.StateDir, "caddy", "user.caddy")
	}
	return c, nil
}

// Client is the part of Config a caller of the API and the gateway needs
// (proliferate's services and actions commands).
type Client struct {
	// Token is the bearer token; TokenFrom names the variable it came from.
	Token, TokenFrom string
	// SidecarURL is where the API is; SidecarURLFrom names the variable it
	// came from, or "" for the default, so errors can say what to change.
	SidecarURL, SidecarURLFrom string
	GatewayURL, SessionID      string
}

// LoadClient reads Client from getenv. Unlike Load it touches no file and
// refuses nothing, so a server-only variable the CLI does not use (a bad
// SANDBOX_MCP_MAX_TERMINALS, say) cannot fail a CLI command.
func LoadClient(getenv func(string) string) Client {
	c := Client{
		GatewayURL: strings.TrimRight(getenv(rules.EnvGatewayURL), "/"),
		SessionID:  getenv(rules.EnvSessionID),
	}
	for _, name := range []string{rules.EnvAuthToken, rules.EnvAuthTokenFallback} {
		if v := getenv(name); v != "" {
			c.Token, c.TokenFrom = v, name
			break
		}
	}
	switch u := urlForAddr(getenv(rules.EnvAddr)); {
	case getenv(rules.EnvSidecarURL) != "":
		c.SidecarURL, c.SidecarURLFrom = getenv(rules.EnvSidecarURL), rules.EnvSidecarURL
	case u != DefaultSidecarURL:
		c.SidecarURL, c.SidecarURLFrom = u, rules.EnvAddr
	default:
		c.SidecarURL = DefaultSidecarURL
	}
	c.SidecarURL = strings.TrimRight(c.SidecarURL, "/")
	return c
}

// WorkspaceDir resolves the workspace as the sidecar and the CLI both do:
// WORKSPACE_DIR, else the default; either only when it is a directory, else
// cwd. It never creates a folder.
func WorkspaceDir(getenv func(string) string, cwd string) (string, error) {
	ws := or(getenv(rules.EnvWorkspaceDir), DefaultWorkspaceDir)
	if !isDir(ws) {
		if cwd == "" {
			return "", fmt.Errorf("workspace dir %q does not exist and no working directory is known", ws)
		}
		ws = cwd
	}
	abs, err := filepath.Abs(ws)
	if err != nil {
		return "", fmt.Errorf("resolve workspace dir %q: %w", ws, err)
	}
	return abs, nil
}

// EnvWorkspaceDir is the workspace of `proliferate env`: WORKSPACE_DIR as
// given when it is set (the platform names it; the CLI creates what the spec
// needs below it), else resolved as the sidecar does (WorkspaceDir), so the
// CLI never creates /home/user/workspace on a machine that has none.
func EnvWorkspaceDir(getenv func(string) string, cwd string) (string, error) {
	if ws := getenv(rules.EnvWorkspaceDir); ws != "" {
		return ws, nil
	}
	return WorkspaceDir(getenv, cwd)
}

// URLForAddr is the loopback URL of an API listening on addr (wildcard hosts
// become loopback); the default URL when addr is empty or unusable.
func URLForAddr(addr string) string { return urlForAddr(addr) }

func urlForAddr(addr string) string {
	if addr == "" {
		return DefaultSidecarURL
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return DefaultSidecarURL
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func or(v, def string) string {
	if v != "" {
		return v
	}
	return def
}
